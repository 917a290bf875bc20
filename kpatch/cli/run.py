"""`kpatch run -- CMD ARGS...`: run a program with its GPU code patched as it loads."""

from __future__ import annotations

import json
import os
import sys

import click

from kpatch.cli.common import err_console
from kpatch.delivery import run as runmod
from kpatch.errors import UsageError


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--mode", type=click.Choice(runmod.MODES),
              help="override (gfx1030 code on a gfx1010 under HSA_OVERRIDE_GFX_VERSION=10.3.0; the default when "
                   "a gfx1010 GPU is found) or harden (a ROCm built for gfx1010).")
@click.option("--strict", is_flag=True,
              help="A code object kpatch refused (or only partly patched) fails to load instead of running unpatched.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False),
              help="The hook's JSON-lines log (default: a new file under CACHE/logs/).")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False),
              help="The cache directory (default: $KPATCH_CACHE_DIR, else $XDG_CACHE_HOME/kpatch, else ~/.cache/kpatch).")
@click.option("--no-steer", is_flag=True,
              help="Do not turn off the MIOpen solvers whose kernels kpatch refused.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON document (on stderr).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED, metavar="-- CMD [ARGS]...")
def run_cmd(mode, strict, log_path, cache_dir, no_steer, as_json, command) -> None:
    """Run CMD with every gfx1030 code object it loads patched for gfx1010.

    Sets HSA_OVERRIDE_GFX_VERSION=10.3.0 (override mode), HSA_TOOLS_LIB (the
    load-time hook, after any tools already named there),
    HSA_TOOLS_ROCPROFILER_V1_TOOLS=1 (keeps HSA_TOOLS_LIB working on ROCm
    6.1+) and KPATCH_* for the hook; turns off (MIOPEN_DEBUG_*=0) the MIOpen
    solvers whose kernels the cache holds as refused, and says so; runs CMD
    and exits with its status (128+N for signal N). Ctrl-C reaches CMD and
    kpatch waits for it. Afterwards it prints on stderr what the hook saw:
    objects patched / partial / already safe / refused (with kernels and
    reasons) / errors, cache hits, and where the log is.

    Example: kpatch run -- python train.py
    """
    from kpatch.delivery import cache, hooklib

    cmd = list(command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("kpatch run: no command given (kpatch run -- CMD ARGS...)")
    choice = runmod.choose_mode(mode, os.environ)
    cdir = os.path.abspath(cache_dir or cache.cache_dir())
    log = os.path.abspath(log_path) if log_path else runmod.default_log_path(cdir)
    os.makedirs(os.path.dirname(log), exist_ok=True)
    offset = os.path.getsize(log) if os.path.exists(log) else 0
    setup = runmod.build_env(os.environ, mode=choice.mode, cache_dir=cdir, log_path=log, strict=strict,
                             steer=not no_steer, hook=hooklib.hook_library_path())
    say = (lambda text: None) if as_json else (lambda text: err_console.print(text, markup=False, highlight=False))
    say(f"kpatch: {choice.mode} mode ({choice.why}); cache {cdir}")
    for note in setup.notes:
        say(f"kpatch: {note}")
    for s in setup.steered:
        say(f"kpatch: set {s.name}={s.value}: {s.reason}")
    for s in setup.kept:
        say(f"kpatch: kept {s.name}={setup.env[s.name]} as you set it (kpatch would set {s.value}: {s.reason})")
    for kernel, why in setup.unsteered:
        say(f"kpatch: not steered: {kernel}: {why}")
    sys.stdout.flush()
    status = runmod.run_child(cmd, setup.env)
    lines, bad = runmod.read_log(log, offset)
    summary = runmod.summarize(lines, cdir, choice.mode, log, bad)
    summary["exit_status"] = status
    summary["steering"] = [{"env": s.name, "value": s.value, "solvers": list(s.solvers), "kernels": list(s.kernels),
                            "reason": s.reason} for s in setup.steered]
    summary["not_steered"] = [{"kernel": k, "reason": w} for k, w in setup.unsteered]
    if as_json:
        print(json.dumps(summary, sort_keys=True), file=sys.stderr)
    else:
        for line in runmod.summary_text(summary):
            say(line)
    sys.exit(status)
