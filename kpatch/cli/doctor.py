"""`kpatch doctor [--json]`: what this system is, and what to do next."""

from __future__ import annotations

import json
import os

import click

from kpatch.cli.common import EXIT_OK, EXIT_SOME_FAILED, out_console, progress


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (checks and the facts behind them).")
@click.option("--python", "python", type=click.Path(dir_okay=False),
              help="The Python that runs your PyTorch (default: the first of kpatch's own and `python3` on PATH "
                   "that imports torch).")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False),
              help="kpatch's cache (default: $KPATCH_CACHE_DIR, else $XDG_CACHE_HOME/kpatch, else ~/.cache/kpatch).")
@click.option("--no-coverage", is_flag=True, help="Skip reading the PyTorch install's code objects (faster).")
@click.option("--root", default="/", hidden=True, type=click.Path(file_okay=False),
              help="The file-system root to inspect (tests: a fake tree).")
def doctor_cmd(as_json, python, cache_dir, no_coverage, root) -> None:
    """Check this system for running PyTorch on an RX 5600 XT / 5700 XT with kpatch.

    Reports the GPU(s) from the KFD topology, the amdgpu driver and
    /dev/kfd, HSA_OVERRIDE_GFX_VERSION, PyTorch (version, HIP version) and
    the ROCm libraries it really loads (a ROCm wheel bundles its own), MIOpen's
    user cache directory and DB name, kpatch's hook and cache, and how many of
    the install's gfx1030 code objects the cache has patched / refused / not
    yet seen. Each line is ok, warning or problem, with the next command.
    Exit status 1 when there is a problem.
    """
    from kpatch.fieldkit import doctor

    opts = doctor.Options(root=os.path.abspath(root), python=python, cache_dir=cache_dir, coverage=not no_coverage)
    with progress("reading the install's code objects") as update:
        opts.on_object = lambda: update(advance=1)
        diag = doctor.diagnose(opts)
    doc = diag.to_json()
    if as_json:
        print(json.dumps(doc, indent=1, sort_keys=True))
    else:
        for line in doctor.text_lines(doc):
            out_console.print(line, markup=False, highlight=False)
    raise SystemExit(EXIT_SOME_FAILED if diag.problems else EXIT_OK)
