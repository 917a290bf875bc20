"""`kpatch run`: run a program with every gfx1030 code object it loads patched.

The program runs with the load-time hook (``hooklib.hook_library_path()``) in
``HSA_TOOLS_LIB``: ROCr loads it during ``hsa_init`` and every code object HIP
hands the loader passes through it (see ``hook/kpatch_hook.c``).  This
module builds that environment (:func:`build_env`), runs the program
(:func:`run_child`: its exit status is kpatch's, a signal N gives 128+N like
a shell; Ctrl-C reaches it and kpatch waits for it), and afterwards reads
the hook's JSON-lines log joined with the cache records
(:func:`summarize`) to say what was patched, refused (naming kernels and
reasons), served from the cache, and where the log is.

Modes: ``override`` (the program runs gfx1030 code on a gfx1010 under
``HSA_OVERRIDE_GFX_VERSION=10.3.0``; chosen when a gfx1010 GPU is found in
KFD's topology, or the override is already set, or ``--mode override``) and
``harden`` (gfx1010-labelled code on a native gfx1010 ROCm build; only when
asked).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from kpatch.delivery import steering
from kpatch.errors import UsageError
from kpatch.miopen.device import GFX1010_VERSION, OVERRIDE_VALUE, read_gpu_nodes

MODES = ("override", "harden")
TOOLS_LIB = "HSA_TOOLS_LIB"
#: ROCm 6.1+ skips HSA_TOOLS_LIB while a rocprofiler-sdk tool is registered; this keeps it.
V1_TOOLS = "HSA_TOOLS_ROCPROFILER_V1_TOOLS"
#: Actions the hook logs (kpatch_hook.c), in the order the summary lists them.
ACTIONS = ("patched", "partial", "safe", "refused", "error", "passthrough", "other-target", "not-amdgpu")

MODE_HELP = ("override: the program runs gfx1030 code on a gfx1010 GPU (HSA_OVERRIDE_GFX_VERSION=10.3.0 is set); "
             "every gfx1030 code object it loads is patched for gfx1010. harden: the program runs a ROCm built "
             "for gfx1010 (no override); gfx1010 code objects get the same hardware fixes.")


@dataclass(frozen=True)
class ModeChoice:
    mode: str
    why: str


def choose_mode(requested: str | None, env: Mapping[str, str], sysfs_root: str = "/sys") -> ModeChoice:
    """The mode to run in: as asked, else override when a gfx1010 GPU is in
    KFD's topology or the override is already set; else a UsageError that
    says what the modes do."""
    if requested:
        if requested not in MODES:
            raise UsageError(f"unknown mode {requested!r}: choose override or harden")
        return ModeChoice(requested, f"--mode {requested}")
    if env.get("HSA_OVERRIDE_GFX_VERSION") == OVERRIDE_VALUE:
        return ModeChoice("override", f"HSA_OVERRIDE_GFX_VERSION={OVERRIDE_VALUE} is set")
    nodes = [n for n in read_gpu_nodes(sysfs_root) if n.gfx_target_version == GFX1010_VERSION]
    if nodes:
        return ModeChoice("override", f"gfx1010 GPU found (KFD node {nodes[0].node})")
    raise UsageError("no gfx1010 GPU found in /sys/class/kfd and HSA_OVERRIDE_GFX_VERSION is not 10.3.0: "
                     "say --mode override or --mode harden. " + MODE_HELP)


def _quote_tool(path: str) -> str:
    """*path* as one name in ROCr's HSA_TOOLS_LIB list (parse_tool_names in
    ROCr's runtime.cpp: names split on spaces; a backslash escapes the next
    character; double quotes group)."""
    return "".join("\\" + c if c in ' "\\' else c for c in path)


def parse_tool_names(value: str) -> list[str]:
    """HSA_TOOLS_LIB split into library names exactly as ROCr's
    parse_tool_names (runtime.cpp) does, quirks included: a space outside
    quotes ends a name even when it is empty (two spaces give an empty
    name, which ROCr fails to load); an opening double quote drops the plain
    text just before it; a closing one ends the name; a backslash takes the
    next character literally.  A backslash as the last character, on which
    ROCr never returns, is dropped here (:func:`tools_lib_value` never
    writes one)."""
    names: list[str] = []
    name, plain, quoted, i = "", "", False, 0
    while i < len(value):
        c = value[i]
        i += 1
        if c == "\\":
            if i < len(value):
                name, plain, i = name + plain + value[i], "", i + 1
        elif c == '"' and quoted:
            names.append(name + plain)
            name, plain, quoted = "", "", False
        elif c == '"':
            plain, quoted = "", True
        elif c == " " and not quoted:
            names.append(name + plain)
            name, plain = "", ""
        elif c == " ":
            name, plain = name + plain + " ", ""
        else:
            plain += c
    if name + plain:
        names.append(name + plain)
    return names


def tools_lib_value(existing: str | None, hook: str) -> str:
    """HSA_TOOLS_LIB with the hook appended to the tools already there (ROCr
    loads each, in order; the hook last, so it wraps what they installed and
    they see the bytes it passes on). The hook is not added twice.

    The value is written anew from the names ROCr reads in *existing*, each
    escaped (:func:`_quote_tool`), so an unclosed quote or a trailing
    backslash in it cannot swallow the hook's name (or hang ROCr); empty
    names, which ROCr cannot load, are left out."""
    names = [n for n in parse_tool_names(existing or "") if n]
    if hook not in names:
        names.append(hook)
    return " ".join(_quote_tool(n) for n in names)


@dataclass
class RunSetup:
    """The child's environment and what kpatch says about it."""

    env: dict[str, str]
    mode: str
    cache_dir: str
    log_path: str
    notes: list[str] = field(default_factory=list)
    steered: list[steering.Switch] = field(default_factory=list)
    kept: list[steering.Switch] = field(default_factory=list)
    unsteered: list[tuple[str, str]] = field(default_factory=list)


def refused_in_cache(cache_dir: str, mode: str) -> list[steering.Refused]:
    """Every refused kernel the cache holds for *mode* (from ``refused`` and
    ``partial`` records)."""
    from kpatch.delivery import cache
    out: list[steering.Refused] = []
    for rec in cache.entries(cache_dir):
        info = record_info(rec)
        if info.get("mode", mode) == mode:
            out.extend(steering.refused_in_record(info))
    return out


def record_info(rec) -> dict:
    """A cache record as the dict of its JSON line (``cache.Record`` or a mapping)."""
    if rec is None:
        return {}
    if isinstance(rec, Mapping):
        return dict(rec)
    if callable(getattr(rec, "to_json", None)):
        return dict(rec.to_json())
    for name in ("info", "json", "meta"):
        v = getattr(rec, name, None)
        if isinstance(v, Mapping):
            return dict(v)
    if dataclasses.is_dataclass(rec):
        return dataclasses.asdict(rec)
    return dict(vars(rec))


def default_log_path(cache_dir: str) -> str:
    return os.path.join(cache_dir, "logs", time.strftime("run-%Y%m%d-%H%M%S") + f"-{os.getpid()}.jsonl")


def build_env(base: Mapping[str, str], *, mode: str, cache_dir: str, log_path: str, strict: bool, steer: bool,
              hook: str, python: str | None = None) -> RunSetup:
    """The environment the program runs in."""
    env = dict(base)
    setup = RunSetup(env, mode, cache_dir, log_path)
    if mode == "override":
        old = env.get("HSA_OVERRIDE_GFX_VERSION")
        if old not in (None, OVERRIDE_VALUE):
            setup.notes.append(f"HSA_OVERRIDE_GFX_VERSION was {old}; set to {OVERRIDE_VALUE} for override mode")
        env["HSA_OVERRIDE_GFX_VERSION"] = OVERRIDE_VALUE
    env[TOOLS_LIB] = tools_lib_value(env.get(TOOLS_LIB), hook)
    env[V1_TOOLS] = "1"
    env["KPATCH_CACHE_DIR"] = cache_dir
    env["KPATCH_MODE"] = mode
    env["KPATCH_PYTHON"] = python or sys.executable
    env["KPATCH_LOG"] = log_path
    if strict:
        env["KPATCH_STRICT"] = "1"
    else:
        env.pop("KPATCH_STRICT", None)
    if steer:
        plan = steering.plan(refused_in_cache(cache_dir, mode))
        setup.steered, setup.kept = steering.apply_to_env(plan, env)
        setup.unsteered = list(plan.unsteered)
    return setup


def exit_status(returncode: int) -> int:
    """A child's exit status as a shell reports it: 128+N for signal N."""
    return 128 - returncode if returncode < 0 else returncode


FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_SI_USER = 0   # si_code of kill(2); a terminal's signals come with SI_KERNEL and reach the child itself


def run_child(cmd: list[str], env: Mapping[str, str]) -> int:
    """Run *cmd* in the foreground process group and wait for it; return its
    exit status (128+N for a signal). Ctrl-C at the terminal reaches the
    child directly; a signal sent to kpatch alone (kill) is passed on to the
    child. kpatch itself waits until the child has ended."""
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    try:
        try:
            child = subprocess.Popen(cmd, env=dict(env),
                                     preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_SETMASK, old_mask))
        except FileNotFoundError:
            raise UsageError(f"{cmd[0]}: command not found") from None
        except PermissionError:
            raise UsageError(f"{cmd[0]}: permission denied") from None
        while True:
            try:
                info = signal.sigtimedwait(FORWARDED, 0.05)
            except InterruptedError:
                info = None
            if info is not None and info.si_code == _SI_USER and info.si_pid != child.pid:
                try:
                    child.send_signal(info.si_signo)
                except ProcessLookupError:
                    pass
            rc = child.poll()
            if rc is not None:
                return exit_status(rc)
    finally:
        # drop signals that arrived for the child meanwhile, then restore
        while signal.sigtimedwait(FORWARDED, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


# ---------------------------------------------------------------- summary

def read_log(path: str, offset: int = 0) -> tuple[list[dict], int]:
    """The hook's log lines from byte *offset* on, and how many lines were
    not JSON objects (a line being written when the program was killed)."""
    lines, bad = [], 0
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], 0
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            bad += 1
            continue
        if isinstance(obj, dict):
            lines.append(obj)
        else:
            bad += 1
    return lines, bad


def summarize(lines: Iterable[dict], cache_dir: str, mode: str, log_path: str, bad_lines: int = 0,
              records: Mapping[str, dict] | None = None) -> dict:
    """The run's summary: loads and distinct objects per action, cache hits,
    and for refused/partial/error objects the kernels and reasons from the
    cache records (by key). *records* (key -> record JSON) replaces reading
    the cache (tests)."""
    lines = list(lines)
    hooked = [ln for ln in lines if ln.get("api") == "OnLoad"]
    lines = [ln for ln in lines if ln.get("api") != "OnLoad"]
    by_action: dict[str, dict] = {}
    hits = misses = 0
    for ln in lines:
        action = str(ln.get("action") or "unknown")
        key = ln.get("key")
        a = by_action.setdefault(action, {"loads": 0, "objects": {}})
        a["loads"] += 1
        if key and key not in a["objects"]:
            a["objects"][key] = ln
        hits += ln.get("cache") == "hit"
        misses += ln.get("cache") == "miss"
    details = []
    for action in ("refused", "partial", "error", "passthrough"):
        for key, ln in (by_action.get(action, {}).get("objects") or {}).items():
            info = records.get(key, {}) if records is not None else _record_for(cache_dir, key, mode)
            kernels = [{"name": k.get("name"), "reasons": list(k.get("reasons") or [])}
                       for k in info.get("kernels") or [] if k.get("outcome") == "refused"]
            details.append({"key": key, "action": action, "size": ln.get("size"), "target": ln.get("target"),
                            "reason": ln.get("reason") or info.get("reason"), "refused_kernels": kernels})
    order = list(ACTIONS) + sorted(a for a in by_action if a not in ACTIONS)
    return {
        "log": log_path,
        "cache_dir": cache_dir,
        "mode": mode,
        "hook_loaded": bool(hooked),
        "loads": len(lines),
        "actions": {a: {"loads": by_action[a]["loads"], "objects": len(by_action[a]["objects"])}
                    for a in order if a in by_action},
        "cache_hits": hits,
        "cache_misses": misses,
        "unreadable_log_lines": bad_lines,
        "objects": details,
    }


def _record_for(cache_dir: str, key: str, mode: str) -> dict:
    from kpatch.delivery import cache
    try:
        return record_info(cache.read_record(cache_dir, key, mode))
    except Exception:   # a record that cannot be read names nothing; the log line still counts
        return {}


#: The patcher's hint for a kernel an approximation could patch names apply's
#: option; `kpatch run` has none (it patches exactly or not at all).
_APPLY_HINT = re.compile(r"\(approximation: --allow-approx ([\w-]+)\)")


def _for_run(reason: str) -> str:
    """A refusal reason as `kpatch run` says it: the approximation hint points at `kpatch apply`."""
    return _APPLY_HINT.sub(r"(run patches only exactly; an approximation exists: "
                           r"`kpatch apply --allow-approx \1` on the library)", reason)


def summary_text(s: dict) -> list[str]:
    """The summary as the lines kpatch prints on stderr."""
    a = s["actions"]

    def n(action: str) -> int:
        return a.get(action, {}).get("objects", 0)

    out = [f"kpatch: {s['loads']} code object load(s) seen by the hook ({s['mode']} mode): "
           f"{n('patched')} patched, {n('partial')} partial, {n('safe')} already safe, {n('refused')} refused, "
           f"{n('error')} error(s), {s['cache_hits']} cache hit(s)"]
    other = [f"{v['objects'] or v['loads']} {k}" for k, v in a.items() if k not in ("patched", "partial", "safe", "refused", "error")]
    if other:
        out.append("kpatch: also " + ", ".join(other) + " (passed through unchanged)")
    for d in s["objects"]:
        head = f"kpatch: {d['action']} {d['key']}" + (f" ({d['target']})" if d.get("target") else "")
        if d["refused_kernels"]:
            for k in d["refused_kernels"]:
                why = "; ".join(_for_run(r) for r in k["reasons"]) or "no reason recorded"
                out.append(f"{head}: kernel {k['name']} refused: {why}")
        else:
            out.append(head + (f": {_for_run(d['reason'])}" if d.get("reason") else ""))
    if not s.get("hook_loaded"):
        out.append("kpatch: the hook was not loaded: the program did not start ROCr (no GPU code), or ROCr "
                   "refused the hook (run with HSA_TOOLS_REPORT_LOAD_FAILURE=1 to see why)")
    elif s["loads"] == 0:
        out.append("kpatch: the hook saw no code object load")
    if s["unreadable_log_lines"]:
        out.append(f"kpatch: {s['unreadable_log_lines']} log line(s) were not JSON and were skipped")
    out.append(f"kpatch: log: {s['log']}")
    return out
