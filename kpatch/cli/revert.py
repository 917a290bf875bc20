"""`kpatch revert [DB]`: step the user kernel DB back by one `kpatch apply`, one backup at a time."""

from __future__ import annotations

import json
import os
import sys

import click

from kpatch.cli.apply import rocm_roots
from kpatch.cli.common import EXIT_OK, out_console
from kpatch.errors import KpatchError, UsageError
from kpatch.outputs.miopen_paths import resolve_cache_dir
from kpatch.outputs.userdb import dbs_with_backups, list_backups, restore_latest


def _backup_json(b) -> dict:
    return {"path": b.path, "taken": b.when, "absent": b.absent}


@click.command("revert")
@click.argument("db", required=False, metavar="[DB]")
@click.option("--list", "list_only", is_flag=True,
              help="List the backups left (oldest first; the last is what the next revert restores).")
@click.option("--out-dir", type=click.Path(file_okay=False),
              help="Where to look for user DBs when DB is not given (default: MIOpen's user cache directory).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def revert_cmd(db: str | None, list_only: bool, out_dir: str | None, as_json: bool) -> None:
    """Step the user kernel DB DB back by one `kpatch apply`.

    Every `kpatch apply` that changes DB first copies it to
    DB.kpatch-backup-<UTC time> (or, when there was no DB, leaves a
    ...<time>.absent marker).  Each revert restores the newest backup left
    and consumes it: the backup file is moved over DB in one atomic rename
    (for a marker, DB is removed).  So a second revert restores the backup
    before that, and reverting as many times as you applied gives back DB
    as it was before the first apply; then no backup is left.

    Without DB, the user DBs with backups in MIOpen's user cache directory
    (or --out-dir) are used; if there are several, name one.  With --list,
    show the backups left, oldest first.

    \b
    Exit status: 0 when a backup was restored (or listed); 1 when DB or its
    directory cannot be written; 2 when there is no backup left, no DB or
    several to choose from, or DB is in use (MIOpen running; nothing is
    changed); 3 on an internal error.
    """
    if db:
        dbs = [os.path.abspath(db)]
    else:
        directory = out_dir or resolve_cache_dir(os.environ, rocm_roots=rocm_roots()).path
        dbs = dbs_with_backups(directory)
        if not dbs:
            raise UsageError("no user kernel DB with a kpatch backup here", directory)
    if list_only:
        listing = {d: list_backups(d) for d in dbs}
        if as_json:
            json.dump({d: [_backup_json(b) for b in bs] for d, bs in listing.items()}, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            for d, bs in listing.items():
                out_console.print(f"{d}: {len(bs)} backup(s), oldest first; `kpatch revert` restores the last",
                                  markup=False)
                for b in bs:
                    what = "(no DB: kpatch created it)" if b.absent else f"{os.path.getsize(b.path):,} bytes"
                    out_console.print(f"  {b.when}  {b.path}  {what}", markup=False)
        sys.exit(EXIT_OK)
    if len(dbs) > 1:
        raise UsageError("several user DBs have backups; name one: " + ", ".join(dbs))
    try:
        restored = restore_latest(dbs[0])
    except OSError as e:
        raise KpatchError(f"cannot restore the backup: {e.strerror or e}", dbs[0]) from None
    left = len(list_backups(dbs[0]))
    if as_json:
        json.dump({"db": dbs[0], "restored": _backup_json(restored), "backups_left": left}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        if restored.absent:
            out_console.print(f"removed {dbs[0]}: there was no user DB before that kpatch apply ({restored.when})",
                              markup=False)
        else:
            out_console.print(f"restored {dbs[0]} from {restored.path} ({restored.when})", markup=False)
        more = (f"{left} older backup(s) left: `kpatch revert` again steps back one more apply" if left
                else "no backup left: this is the DB as it was before kpatch's first apply")
        out_console.print(more, markup=False)
    sys.exit(EXIT_OK)
