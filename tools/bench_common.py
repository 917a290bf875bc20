#!/usr/bin/env python3
"""What every tools/bench_*.py shares: the corpus, fair measurement, goal lines.

Fair means: the things compared get equal resources (1 process against 1,
or N concurrent processes against N), every measured thing runs in its own
child process(es), and both its wall time and its CPU time (user + sys of
the child processes, from ``resource.getrusage(RUSAGE_CHILDREN)`` deltas,
which include what those children waited for) are reported, with the load
average of the machine at each repetition.  Ratios are taken against a
reference (llvm-objdump-16, the bz2 codec, ...) measured in the same run.

Run as a script, this module is the worker the benches start:

    python tools/bench_common.py MODE FILE...

MODE ``decode`` decodes every code object's ``.text`` the way
``kpatch disasm`` walks it, without making text; ``unit`` decodes the
functions the analysis decodes (:func:`kpatch.analysis.engine.build_unit`);
``analyse`` runs :func:`kpatch.analysis.analyse`; ``apply`` patches the
kernel DB FILE into the user DB given second (``kpatch apply --db``, no
worker processes); ``bz2`` decompresses every
blob of the kernel DB FILE and compresses (level 9) the code objects of the
file given second (the floor of ``kpatch apply``), which ``bz2-prep`` (not
measured) wrote from the user DB apply wrote.  The worker prints the CPU
seconds of the measured part (imports and file reading excluded) on stdout.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

PY = sys.executable
KPATCH = os.path.join(os.path.dirname(PY), "kpatch")
LIBDIR = os.path.join(ROOT, "kdb_cache", "root", "usr", "lib", "x86_64-linux-gnu")
SPARSE = os.path.join(LIBDIR, "librocsparse.so.0.1")
TENSILE = os.path.join(ROOT, "kdb_cache", "sid-root", "usr", "lib", "x86_64-linux-gnu", "rocblas", "4.4.1",
                       "library")


def installed_env(pyc: str) -> dict:
    """The environment of a measured kpatch process, run as an installed
    package runs: with compiled bytecode (pip writes the .pyc files at
    install), kept in ``pyc`` (a PYTHONPYCACHEPREFIX: the tree is not
    written; fill it with one untimed run), PYTHONDONTWRITEBYTECODE dropped."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = pyc
    return env


def loadavg() -> str:
    """The 1/5/15-minute load averages, as ``uptime`` prints them."""
    return "load %.2f %.2f %.2f" % os.getloadavg()


def cpu_children() -> float:
    """User + sys seconds of every child process waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Run:
    """One measurement: wall seconds, CPU seconds of the children, peak RSS
    (KiB) of the largest child, and what the workers printed."""

    def __init__(self, wall: float, cpu: float, peak_kib: int, outputs: list[str]):
        self.wall, self.cpu, self.peak_kib, self.outputs = wall, cpu, peak_kib, outputs

    def inner(self) -> float:
        """Sum of the CPU seconds the workers printed (their measured part)."""
        return sum(float(o.split()[0]) for o in self.outputs if o.strip())


def run_procs(cmds: list[list[str]], jobs: int = 1, stdout_devnull: bool = False, env=None, cwd=None,
              check: bool = True) -> Run:
    """Run ``cmds`` with at most ``jobs`` at once; wall and CPU of all of
    them (``check``: stop the bench if one exits with a status other than 0)."""
    c0 = cpu_children()
    t0 = time.perf_counter()
    todo = list(cmds)
    running: dict[int, tuple[subprocess.Popen, str]] = {}
    outputs: list[str] = []
    peak = 0
    while todo or running:
        while todo and len(running) < jobs:
            cmd = todo.pop(0)
            fh = tempfile.TemporaryFile()
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL if stdout_devnull else fh, env=env, cwd=cwd)
            running[p.pid] = (p, fh)
        pid, status, ru = os.wait4(-1, 0)
        if pid not in running:
            continue
        p, fh = running.pop(pid)
        p.returncode = os.waitstatus_to_exitcode(status)
        peak = max(peak, ru.ru_maxrss)
        fh.seek(0)
        outputs.append(fh.read().decode(errors="replace"))
        fh.close()
        if check and p.returncode != 0:
            raise SystemExit(f"bench: {' '.join(cmd[:3])}... exited {p.returncode}")
    return Run(time.perf_counter() - t0, cpu_children() - c0, peak, outputs)


def abba(first: list[list[str]], second: list[list[str]], jobs: int = 1,
         first_again: list[list[str]] | None = None, between: list[list[str]] = ()) -> tuple[Run, Run]:
    """Both measurements, run twice each in the order first, second, second,
    first (each time :func:`run_procs`), summed per side: the machine's CPU
    speed drifts by a third within minutes here, and this order puts the
    same share of any steady drift on each side.  ``first_again``: the
    commands of the last run, when they cannot be the first's (e.g. another
    output file).  ``between``: commands run after the first run and before
    the second, not measured (e.g. preparing the second's input from the
    first's output).  Prints each of the four runs' measured part."""
    again = first if first_again is None else first_again
    runs = [run_procs(first, jobs)]
    if between:
        run_procs(list(between))
    runs += [run_procs(cmds, jobs) for cmds in (second, second, again)]
    print("  runs (first, second, second, first), measured part CPU s: "
          + ", ".join(f"{r.inner():.2f}" for r in runs))
    return _summed(runs[0], runs[3]), _summed(runs[1], runs[2])


def _summed(a: Run, b: Run) -> Run:
    return Run(a.wall + b.wall, a.cpu + b.cpu, max(a.peak_kib, b.peak_kib), a.outputs + b.outputs)


def shards(paths: list[str], n: int) -> list[list[str]]:
    """``paths`` split into ``n`` lists of about equal total size (largest first, greedy)."""
    out: list[list[str]] = [[] for _ in range(n)]
    tot = [0] * n
    for p in sorted(paths, key=os.path.getsize, reverse=True):
        k = tot.index(min(tot))
        out[k].append(p)
        tot[k] += os.path.getsize(p)
    return [s for s in out if s]


def corpus(dest: str, limit: int = 0, sparse: bool = True) -> list[str]:
    """Write the gfx1030 code objects of the corpus (librocrand's, and
    librocsparse's when it was fetched and ``sparse``) into ``dest``; their paths."""
    from isa_corpus import gfx1030_objects
    libs = ("librocrand.so.1.1", "librocsparse.so.0.1") if sparse else ("librocrand.so.1.1",)
    paths = []
    for k, (_, blob) in enumerate(gfx1030_objects(libs)):
        if limit and k >= limit:
            break
        p = os.path.join(dest, f"{k:03d}.co")
        with open(p, "wb") as fh:
            fh.write(blob)
        paths.append(p)
    if not paths:
        sys.exit("no code objects: run tools/fetch_corpus.sh [--all]")
    return paths


def describe_corpus(paths: list[str]) -> str:
    return f"{len(paths)} gfx1030 code objects, {sum(map(os.path.getsize, paths)) / 1e6:.1f} MB"


def line(label: str, r: Run, ref: Run | None = None) -> str:
    """One result line: wall, CPU and (with ``ref``) both ratios."""
    s = f"  {label:34s} wall {r.wall:8.2f} s  cpu {r.cpu:8.2f} s"
    if ref is not None:
        s += f"  ratio cpu {r.cpu / ref.cpu:6.3f}  wall {r.wall / ref.wall:6.3f}"
    if r.peak_kib:
        s += f"  peak {r.peak_kib / 1024:6.0f} MiB"
    return s


def goal(name: str, ratio: float, limit: float, unit: str = "") -> str:
    """``goal NAME: ratio X (goal <= Y) met`` (or ``not met``)."""
    what = "value" if unit else "ratio"
    return (f"goal {name}: {what} {ratio:.3f}{unit} (goal <= {limit}{unit}) "
            f"{'met' if ratio <= limit else 'not met'}")


# --- the worker --------------------------------------------------------------------

def _decode(paths: list[str]) -> float:
    from isa_corpus import text_of
    from kpatch.isa.lines import disassemble_ids
    objs = [text_of(p) for p in paths]
    t = time.process_time()
    for data, addr, syms in objs:
        disassemble_ids(data, "gfx1030", addr, syms)  # what `kpatch disasm` walks, no text
    return time.process_time() - t


def _objects(paths):
    from kpatch.codeobject import CodeObject
    out = []
    for p in paths:
        with open(p, "rb") as fh:
            out.append(CodeObject.from_bytes(fh.read(), name=p))
    return out


def _time_units(cos) -> float:
    """CPU seconds of decoding every function of the code objects ``cos``
    (exactly what the analysis decodes: build_unit)."""
    from kpatch.analysis.engine import build_unit, decode_family, function_ranges
    t = time.process_time()
    for co in cos:
        build_unit(co, decode_family(co.target.processor), [r for r in function_ranges(co) if r[3] >= 0])
    return time.process_time() - t


def _time_analyses(cos) -> float:
    """CPU seconds of ``analyse()`` of each of the code objects ``cos``."""
    from kpatch.analysis import analyse
    t = time.process_time()
    for co in cos:
        analyse(co)
    return time.process_time() - t


def _unit(paths: list[str]) -> float:
    return _time_units(_objects(paths))


def _analyse(paths: list[str]) -> float:
    return _time_analyses(_objects(paths))


def _bz2(paths: list[str]) -> float:
    """The floor of ``kpatch apply``: decompress every compressed blob of the
    kernel DB ``paths[0]`` and compress (level 9) each code object of the
    file ``paths[1]`` (what apply changed, raw, as :func:`_bz2_prep` wrote
    it: no work of this process goes into getting those bytes)."""
    import bz2
    from kpatch.containers.kdb import KernelDB
    with KernelDB.open(paths[0]) as db:
        blobs = [e.kernel_blob for e in db.entries() if e.uncompressed_size]
    changed = _read_raw(paths[1]) if len(paths) > 1 else []
    t = time.process_time()
    for b in blobs:
        bz2.decompress(b)
    for c in changed:
        bz2.compress(c, 9)
    return time.process_time() - t


def _bz2_prep(paths: list[str]) -> float:
    """Not measured: the code of every row of the user DB ``paths[0]`` (what
    apply wrote), decompressed and written raw into ``paths[1]`` for
    :func:`_bz2` (an 8-byte little-endian length before each).  The floor's
    process then spends nothing on getting them: decompressing them there
    counted that work in the floor's CPU, which flattered apply's ratio by
    about a fifth."""
    from kpatch.containers.kdb import KernelDB
    with KernelDB.open(paths[0]) as db, open(paths[1], "wb") as fh:
        for e in db.entries():
            c = e.code()
            fh.write(len(c).to_bytes(8, "little"))
            fh.write(c)
    return 0.0


def _read_raw(path: str) -> list[bytes]:
    """The code objects :func:`_bz2_prep` wrote into ``path``."""
    with open(path, "rb") as fh:
        data = fh.read()
    out, at = [], 0
    while at < len(data):
        n = int.from_bytes(data[at:at + 8], "little")
        out.append(data[at + 8:at + 8 + n])
        at += 8 + n
    return out


def _apply(paths: list[str]) -> float:
    from kpatch.apply.db import apply_to_db
    from kpatch.apply.modes import default_patch_fn, default_provenance_fn
    t = time.process_time()
    res = apply_to_db([paths[0]], paths[1], mode="override", rule_sets=[], patch_fn=default_patch_fn("override"),
                      is_patched=default_provenance_fn(), dry_run=False, jobs=1)
    t = time.process_time() - t
    print(res.counts() if hasattr(res, "counts") else res, file=sys.stderr)
    return t


def _warm(paths: list[str], analyse_too: bool) -> float:
    """``_unit`` or ``_analyse`` of ``paths`` after one analysis of them all
    (in this process) with the decoder's caches emptied again: every
    encoding's facts known (:data:`kpatch.analysis.facts.FACTS` kept), every
    encoding decoded anew.  The analysis measured so does its work per
    instruction and per function only (bench_analysis --split)."""
    import gc

    from kpatch.isa import decoder
    cos = _objects(paths)
    _time_analyses(cos)
    decoder._CACHES.clear()  # (a diagnostic: the decoder has no public way to forget)
    gc.collect()
    return _time_analyses(cos) if analyse_too else _time_units(cos)


WORKERS = {"decode": _decode, "unit": _unit, "analyse": _analyse, "bz2": _bz2, "bz2-prep": _bz2_prep, "apply": _apply,
           "unit-warm": lambda p: _warm(p, False), "analyse-warm": lambda p: _warm(p, True)}


def worker_cmd(mode: str, paths: list[str]) -> list[str]:
    return [PY, os.path.abspath(__file__), mode, *paths]


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    print(f"{WORKERS[sys.argv[1]](sys.argv[2:]):.4f}")
