"""`kpatch warm PATH...` and `kpatch cache [show|prune]`: the load-time cache, ahead of time and at rest."""

from __future__ import annotations

import json
import os

import click

from kpatch.cli.common import EXIT_OK, EXIT_SOME_FAILED, err_console, error_line, progress
from kpatch.delivery import run as runmod
from kpatch.delivery import warm as warmmod
from kpatch.errors import UsageError

CACHE_HELP = "The cache directory (default: $KPATCH_CACHE_DIR, else $XDG_CACHE_HOME/kpatch, else ~/.cache/kpatch)."


def _dir(cache_dir: str | None) -> str:
    from kpatch.delivery import cache
    return os.path.abspath(cache_dir or cache.cache_dir())


def _say(text: str) -> None:
    err_console.print(text, markup=False, highlight=False)


@click.command("warm")
@click.argument("paths", nargs=-1, required=True, metavar="PATH...")
@click.option("--mode", type=click.Choice(runmod.MODES), default="override", show_default=True,
              help="The mode `kpatch run` will use.")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False), help=CACHE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def warm_cmd(paths, mode, cache_dir, as_json) -> None:
    """Fill the load-time cache from PATH... so `kpatch run` does not stall on patching.

    PATH is anything `kpatch scan` reads: a PyTorch install (torch/lib/*.so
    fat binaries, torch/lib/rocblas/library/), MIOpen kernel DBs, code
    objects, bundles, wheels. Every code object for the mode's processor
    (gfx1030 in override mode) is patched into the cache as the hook would
    patch it when the program loads it; objects already cached are kept.
    """
    cdir = _dir(cache_dir)
    with progress("warming the cache") as update:
        result = warmmod.warm(paths, mode, cdir, on_object=lambda uri: update(advance=1))
    for item, reason in result.errors:
        error_line(item, reason)
    if as_json:
        print(json.dumps(dict(result.to_json(), cache_dir=cdir, mode=mode), sort_keys=True))
    else:
        new = ", ".join(f"{n} {s}" for s, n in sorted(result.new.items())) or "none"
        old = ", ".join(f"{n} {s}" for s, n in sorted(result.present.items())) or "none"
        print(f"patched into the cache: {new}; already cached: {old}; other targets skipped: {result.other_targets}")
        for r in result.refusals:
            print(f"refused: {r['kernel']} ({r['uri']}): {'; '.join(r['reasons'])}")
        print(f"cache: {cdir}")
    raise SystemExit(EXIT_SOME_FAILED if result.errors else EXIT_OK)


@click.command("cache")
@click.argument("action", type=click.Choice(["show", "prune"]), default="show")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False), help=CACHE_HELP)
@click.option("--all", "everything", is_flag=True, help="prune: remove every entry.")
@click.option("--older-than", type=click.FloatRange(min=0), metavar="DAYS",
              help="prune: remove entries created more than DAYS ago.")
@click.option("--errors", is_flag=True, help="prune: remove entries whose patching failed (they are redone).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def cache_cmd(action, cache_dir, everything, older_than, errors, as_json) -> None:
    """Show the load-time cache (size, entries by status, refused kernels) or prune it.

    prune removes entries (--all, --older-than DAYS, --errors) and damaged
    or left-over files, only inside the cache directory.
    """
    from kpatch.delivery import cache

    cdir = _dir(cache_dir)
    if action == "prune":
        if not (everything or errors or older_than is not None):
            raise UsageError("kpatch cache prune: say what to remove: --all, --older-than DAYS or --errors")
        if not os.path.isdir(cdir):
            raise UsageError(f"{cdir}: no such cache directory")
        n = cache.prune(cdir, statuses={"error"} if errors else None,
                        older_than=older_than * 86400 if older_than is not None else None, everything=everything)
        if as_json:
            print(json.dumps({"cache_dir": cdir, "removed": n}))
        else:
            print(f"removed {n} entr{'y' if n == 1 else 'ies'} from {cdir}")
        return
    rep = warmmod.cache_report(cdir)
    if as_json:
        print(json.dumps(rep, sort_keys=True))
        return
    print(f"cache: {cdir}: {rep['bytes']:,} bytes, {rep['entries']} entries")
    for k, v in rep["by_status"].items():
        print(f"  {k}: {v}")
    for r in rep["refusals"]:
        what = f"kernel {r['kernel']}" if r["kernel"] else "patching failed"
        print(f"  {r['status']} {r['key']} ({r['mode']}): {what}: {'; '.join(r['reasons'])}")
