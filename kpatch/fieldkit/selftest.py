"""`kpatch selftest`: PyTorch cases on the GPU under `kpatch run`, each in its own process.

The harness (this module) runs in kpatch's Python; the cases
(``cases.py``) run in the user's Python, the one that imports torch (found
as ``kpatch doctor`` finds it, or ``--python``).  On ``--device cuda``
(ROCm's PyTorch calls the GPU "cuda") every case process gets the
environment ``kpatch run`` gives its program (:func:`kpatch.delivery.run.build_env`:
the override, the load-time hook, the cache, MIOpen steering), so every
code object it loads is patched as in real use; the hook's log says, per
case, which objects were patched or refused.

A case process that runs past its timeout is killed with its whole process
group and marked ``hung``; one that dies (a GPU memory fault aborts the
process, a segmentation fault) is ``crashed``; the other cases go on.  The
check that was running is known from the case's own result file, written
line by line.  Nothing ever runs on the CPU in place of the GPU: without a
GPU in KFD's topology, or when torch cannot reach it, selftest says so and
stops before running any case.  ``--device cpu`` runs the cases' device
side on the CPU, without the hook: it only tests this harness.

Case statuses, worst first: hung, crashed, error (the op raised, e.g. a HIP
error), wrong (a result outside the stated tolerance), pass, skipped.
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import kpatch
from kpatch.errors import UsageError

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.py")
DEVICES = ("cuda", "cpu")
#: case statuses, worst first
STATUS_ORDER = ("hung", "crashed", "error", "wrong", "pass", "skipped")
DEFAULT_TIMEOUT = 300.0
#: lines of a failed case's stderr kept in the report
STDERR_LINES = 20


@dataclass
class Options:
    """What to run and where (the CLI's options)."""

    device: str = "cuda"
    quick: bool = False
    only: list[str] = field(default_factory=list)
    timeout: float = DEFAULT_TIMEOUT
    python: str | None = None
    mode: str | None = None
    cache_dir: str | None = None
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    root: str = "/"
    on_case: Callable[[dict], None] | None = None
    on_start: Callable[[str, int, int], None] | None = None


def _json_out(cmd: list[str], env: Mapping[str, str], timeout: float) -> object:
    try:
        p = subprocess.run(cmd, env=dict(env), capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise UsageError(f"`{' '.join(cmd[1:3])}` did not finish within {timeout:.0f} s", cmd[0]) from None
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("{", "["))]
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
        raise UsageError(f"the case runner failed: {tail}", cmd[0])
    return json.loads(lines[-1])


def list_cases(python: str, env: Mapping[str, str]) -> list[dict]:
    """Every case ``cases.py`` defines (hidden harness checks too)."""
    return list(_json_out([python, CASES, "list", "--all"], env, 120.0))


def select(cases: list[dict], quick: bool, only: list[str]) -> list[dict]:
    """The cases to run: those matching any ``only`` pattern (fnmatch; the
    only way to reach the hidden ``selfcheck-*`` cases), else all listed
    cases, or the quick ones."""
    if only:
        chosen = [c for c in cases if any(fnmatch.fnmatchcase(c["name"], p) for p in only)]
        unmatched = [p for p in only if not any(fnmatch.fnmatchcase(c["name"], p) for c in cases)]
        if unmatched:
            raise UsageError(f"no case matches {', '.join(unmatched)} (see `kpatch selftest --list`)")
        return chosen
    return [c for c in cases if not c["hidden"] and (c["quick"] or not quick)]


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _tail(path: str, lines: int = STDERR_LINES) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [ln.rstrip() for ln in text.splitlines()[-lines:]]


def _events(path: str) -> list[dict]:
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue  # a line cut off by the crash
                if isinstance(obj, dict):
                    out.append(obj)
    except OSError:
        pass
    return out


def run_one(python: str, case: dict, device: str, env: Mapping[str, str], timeout: float, workdir: str) -> dict:
    """Run one case in its own process (and process group) and classify it."""
    name = case["name"]
    out_path = os.path.join(workdir, name + ".jsonl")
    err_path = os.path.join(workdir, name + ".stderr")
    t0 = time.monotonic()
    with open(err_path, "wb") as err:
        p = subprocess.Popen([python, CASES, "run", name, "--device", device, "--out", out_path], env=dict(env),
                             stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT, start_new_session=True)
        hung = False
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            hung = True
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            rc = p.wait()
        except BaseException:  # Ctrl-C: the case goes too
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
            raise
    seconds = time.monotonic() - t0
    events = _events(out_path)
    checks: list[dict] = []
    running = None
    for ev in events:
        if ev.get("event") == "start":
            running = {"check": ev.get("check"), "status": None}
            checks.append(running)
        elif ev.get("event") == "result" and running is not None:
            running.update({k: v for k, v in ev.items() if k != "event"})
            running = None
    if hung:
        exit_text = f"killed after the {timeout:g} s timeout"
    elif rc < 0:
        exit_text = f"died of {_signal_name(-rc)}"
    else:
        exit_text = f"exit status {rc}"
    unfinished = [c for c in checks if c["status"] is None]
    for c in unfinished:
        c["status"] = "hung" if hung else "crashed"
        c["detail"] = exit_text + " while this check ran"
    result = {"name": name, "kind": case.get("kind"), "dtype": case.get("dtype"), "what": case.get("what", ""),
              "tolerance": case.get("tolerance"), "checks": checks, "exit": exit_text, "seconds": round(seconds, 3)}
    statuses = {c["status"] for c in checks}
    if hung:
        result["status"] = "hung"
    elif rc != 0 or unfinished:
        result["status"] = "crashed"
        if not checks:
            result["detail"] = f"{exit_text} before its first check"
        no_dev = [e for e in events if e.get("event") == "no-device"]
        if no_dev:
            result["status"], result["detail"] = "error", no_dev[0].get("reason")
    elif not checks:
        result["status"], result["detail"] = "error", "the case reported no check"
    else:
        result["status"] = next(s for s in STATUS_ORDER if s in statuses)
    if result["status"] in ("hung", "crashed", "error"):
        result["output_tail"] = _tail(err_path)
    return result


def _hook_summary(lines: list[dict], cache_dir: str, mode: str, log: str) -> dict:
    from kpatch.delivery import run as runmod
    return runmod.summarize(lines, cache_dir, mode, log)


def selftest(opts: Options) -> dict:
    """Run the selected cases; the report (a dict for :mod:`report`).
    UsageError (nothing run) when there is no GPU for ``--device cuda``,
    no Python with torch, or torch cannot reach the GPU."""
    from kpatch.fieldkit import doctor

    if opts.device not in DEVICES:
        raise UsageError(f"--device {opts.device}: choose cuda (the GPU) or cpu (tests the harness only)")
    env = dict(opts.env)
    found, tried = doctor.find_torch_python(opts.python, env)
    if found is None:
        raise UsageError("no Python that imports torch ("
                         + "; ".join(f"{t.python}: {t.error}" for t in tried) + "); pass --python PATH")
    diag = doctor.diagnose(doctor.Options(root=opts.root, env=env, python=opts.python, cache_dir=opts.cache_dir,
                                          coverage=False, found=found))
    python = found.python
    setup = None
    hook_info: dict = {"used": False}
    if opts.device == "cuda":
        gpus = doctor.read_gpus(opts.root)
        if not gpus:
            raise UsageError("no AMD GPU in the KFD topology (/sys/class/kfd): nothing to test; selftest never runs "
                             "GPU cases on the CPU (`--device cpu` only tests the harness)")
        from kpatch.delivery import cache as cachemod
        from kpatch.delivery import hooklib, run as runmod
        choice = runmod.choose_mode(opts.mode, env, os.path.join(opts.root, "sys"))
        cdir = os.path.abspath(opts.cache_dir or cachemod.cache_dir())
        log = runmod.default_log_path(cdir)
        os.makedirs(os.path.dirname(log), exist_ok=True)
        setup = runmod.build_env(env, mode=choice.mode, cache_dir=cdir, log_path=log, strict=False, steer=True,
                                 hook=hooklib.hook_library_path())
        env = setup.env
        hook_info = {"used": True, "mode": choice.mode, "why": choice.why, "cache_dir": cdir, "log": log,
                     "steered": [{"env": s.name, "value": s.value, "reason": s.reason} for s in setup.steered]}
    probe = _json_out([python, CASES, "probe", "--device", opts.device], env, 300.0)
    if not probe.get("ok"):
        raise UsageError(f"{probe.get('reason')}; nothing was run", python)
    cases = select(list_cases(python, env), opts.quick, opts.only)
    started = datetime.datetime.now(datetime.timezone.utc)
    results = []
    with tempfile.TemporaryDirectory(prefix="kpatch-selftest-") as work:
        for i, case in enumerate(cases):
            if opts.on_start:
                opts.on_start(case["name"], i, len(cases))
            offset = os.path.getsize(hook_info["log"]) if setup and os.path.exists(hook_info["log"]) else 0
            r = run_one(python, case, opts.device, env, opts.timeout, work)
            if r["status"] == "hung" and setup is not None:
                r["detail"] = ("on a first run the hook may still have been patching a large code object (the "
                               "case's time includes it): run `kpatch warm` on your PyTorch install, then again")
            if setup is not None:
                from kpatch.delivery import run as runmod
                lines, _bad = runmod.read_log(hook_info["log"], offset)
                s = _hook_summary(lines, hook_info["cache_dir"], hook_info["mode"], hook_info["log"])
                r["hook"] = {"loads": s["loads"], "actions": s["actions"], "objects": s["objects"]}
            results.append(r)
            if opts.on_case:
                opts.on_case(r)
    if setup is not None:
        from kpatch.delivery import run as runmod
        lines, _bad = runmod.read_log(hook_info["log"], 0)
        hook_info["summary"] = _hook_summary(lines, hook_info["cache_dir"], hook_info["mode"], hook_info["log"])
    counts = {s: sum(r["status"] == s for r in results) for s in STATUS_ORDER}
    return {
        "kind": "kpatch-selftest",
        "report_version": 1,
        "kpatch_version": kpatch.__version__,
        "date": started.strftime("%Y-%m-%d"),
        "device": opts.device,
        "harness_only": opts.device == "cpu",
        "quick": opts.quick,
        "timeout_s": opts.timeout,
        "platform": {"python": probe.get("python_version") or found.info.get("python_version"),
                     "torch": probe.get("torch"), "hip": probe.get("hip"), "device_name": probe.get("device_name"),
                     "arch": probe.get("arch"), "compute_units": probe.get("compute_units")},
        "hook": hook_info,
        "counts": counts,
        "cases": results,
        "doctor": diag.to_json(),
    }


def exit_ok(report: dict) -> bool:
    """Did every case pass (or skip)?"""
    return all(r["status"] in ("pass", "skipped") for r in report["cases"])
