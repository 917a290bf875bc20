"""`kpatch revert [DB]`: step the user kernel DB back by one `kpatch apply`, one backup at a time."""

from __future__ import annotations

import json
import os
import sys

import click

from kpatch.cli.apply import rocm_roots
from kpatch.cli.common import EXIT_OK, out_console
from kpatch.errors import KpatchError, UsageError
from kpatch.miopen.paths import resolve_cache_dir
from kpatch.apply.userdb import count_rows, dbs_with_backups, list_backups, restore_latest


def _backup_json(b) -> dict:
    return {"path": b.path, "taken": b.when}


@click.command("revert")
@click.argument("db", required=False, metavar="[DB]")
@click.option("--list", "list_only", is_flag=True,
              help="List the backups left (oldest first; the last is what the next revert restores).")
@click.option("--out-dir", type=click.Path(file_okay=False),
              help="Where to look for user DBs when DB is not given (default: MIOpen's user cache directory).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def revert_cmd(db: str | None, list_only: bool, out_dir: str | None, as_json: bool) -> None:
    """Step the user kernel DB DB back by one `kpatch apply`.

    Every `kpatch apply` that changes DB first writes a backup,
    DB.kpatch-backup-<UTC time>: the rows it replaced, exactly as they were,
    and what it wrote in their place.  Each revert checks the newest backup
    left (it must open, pass SQLite's integrity_check, have MIOpen's schema
    and decode to its hashes; a damaged one is refused and nothing changes),
    then, in one SQLite transaction in the live DB: puts back each row that
    apply replaced, removes each row that apply added, and keeps any row
    another process (MIOpen) wrote under such a key since.  Rows MIOpen
    added after the apply are never touched, and MIOpen may keep running.
    The backup is then consumed, so a second revert steps back the apply
    before that, and reverting as many times as you applied gives back
    every row as it was before the first apply.

    Without DB, the user DBs with backups in MIOpen's user cache directory
    (or --out-dir) are used; if there are several, name one.  With --list,
    show the backups left, oldest first.

    \b
    Exit status: 0 when a backup was restored (or listed); 1 when the newest
    backup is damaged or DB cannot be written; 2 when there is no backup
    left, no DB or several to choose from, DB is a symbolic link, or MIOpen
    kept DB locked for over 60 s (nothing is changed); 3 on an internal
    error; 130 when interrupted.
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
                    out_console.print(f"  {b.when}  {b.path}  {_size(b.path)}", markup=False)
        sys.exit(EXIT_OK)
    if len(dbs) > 1:
        raise UsageError("several user DBs have backups; name one: " + ", ".join(dbs))
    try:
        done = restore_latest(dbs[0])
    except OSError as e:
        raise KpatchError(f"cannot revert: {e.strerror or e}", dbs[0]) from None
    left = len(list_backups(dbs[0]))
    rows = count_rows(dbs[0])
    if as_json:
        json.dump({"db": dbs[0], "restored": _backup_json(done.backup), "rows_restored": done.restored,
                   "rows_removed": done.removed, "rows_already_as_before": done.already,
                   "rows_kept": done.kept, "rows_in_db": rows, "backups_left": left}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        sys.exit(EXIT_OK)
    out_console.print(f"reverted {dbs[0]} to before the apply of {done.backup.when} ({done.backup.path}): "
                      f"{len(done.restored)} rows put back, {len(done.removed)} rows that apply added removed, "
                      f"{len(done.already)} already as before, {len(done.kept)} kept", markup=False)
    for label in done.kept:
        out_console.print(f"  kept {label}: another process wrote it after that apply", markup=False)
    if rows is not None:
        out_console.print(f"{dbs[0]} holds {rows} rows (rows added since the apply are kept)", markup=False)
    more = (f"{left} older backup(s) left: `kpatch revert` again steps back one more apply" if left
            else "no backup left: every row kpatch wrote is as it was before kpatch's first apply")
    out_console.print(more, markup=False)
    sys.exit(EXIT_OK)


def _size(path: str) -> str:
    try:
        return f"{os.path.getsize(path):,} bytes"
    except OSError as e:
        return f"({e.strerror})"
