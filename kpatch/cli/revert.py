"""`kpatch revert [DB]`: put back the user kernel DB as it was before `kpatch apply`."""

from __future__ import annotations

import json
import os
import sys

import click

from kpatch.cli.apply import rocm_roots
from kpatch.cli.common import EXIT_OK, out_console
from kpatch.errors import UsageError
from kpatch.outputs.miopen_paths import resolve_cache_dir
from kpatch.outputs.userdb import dbs_with_backups, list_backups, restore_latest


def _backup_json(b) -> dict:
    return {"path": b.path, "taken": b.when, "absent": b.absent}


@click.command("revert")
@click.argument("db", required=False, metavar="[DB]")
@click.option("--list", "list_only", is_flag=True, help="List the backups instead of restoring.")
@click.option("--out-dir", type=click.Path(file_okay=False),
              help="Where to look for user DBs when DB is not given (default: MIOpen's user cache directory).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def revert_cmd(db: str | None, list_only: bool, out_dir: str | None, as_json: bool) -> None:
    """Restore the latest kpatch backup of the user kernel DB DB.

    `kpatch apply` copies a user DB to DB.kpatch-backup-<UTC time> before
    changing it (or notes that there was none).  Revert puts the newest
    backup back atomically (or removes the DB if kpatch created it); the
    backups are kept.  Without DB, the user DBs with backups in MIOpen's
    user cache directory (or --out-dir) are used; if there are several,
    name one.  With --list, show the backups, oldest first.
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
                out_console.print(f"{d}: {len(bs)} backup(s)", markup=False)
                for b in bs:
                    what = "(no DB: kpatch created it)" if b.absent else f"{os.path.getsize(b.path):,} bytes"
                    out_console.print(f"  {b.when}  {b.path}  {what}", markup=False)
        sys.exit(EXIT_OK)
    if len(dbs) > 1:
        raise UsageError("several user DBs have backups; name one: " + ", ".join(dbs))
    restored = restore_latest(dbs[0])
    if as_json:
        json.dump({"db": dbs[0], "restored": _backup_json(restored)}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif restored.absent:
        out_console.print(f"removed {dbs[0]}: there was no user DB before kpatch apply ({restored.when})",
                          markup=False)
    else:
        out_console.print(f"restored {dbs[0]} from {restored.path} ({restored.when})", markup=False)
    sys.exit(EXIT_OK)
