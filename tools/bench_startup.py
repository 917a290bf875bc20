#!/usr/bin/env python3
"""Benchmark kpatch's start-up, fairly (not a test).

--reps times, each command run --n times in a row (one process at a time):
  * reference: the bare interpreter (`python -c pass`) and `python -c
    "import numpy"`,
  * `kpatch --help`, `kpatch explain`, `kpatch rules`, `kpatch scan @sample`,
and prints, per invocation, the mean wall and CPU time (user+sys of the
process), the load average per repetition, which heavy modules (numpy, the
patcher, the bulk decoder) each light command imported, and the goals of
issue 14: <= 0.15 s for help/explain (and rules), <= 0.3 s for a small scan
(CPU per invocation).

The commands run as an installed package runs: with compiled bytecode
(pip writes the .pyc files at install).  The bytecode goes to a temporary
PYTHONPYCACHEPREFIX (the tree is not written), filled by one untimed run of
each command; PYTHONDONTWRITEBYTECODE is dropped from the children's
environment.  One more line per command shows the cost without kpatch's bytecode
(PYTHONDONTWRITEBYTECODE=1: kpatch's modules compiled at each start, the
interpreter's and libraries' own .pyc used), for comparison.
Usage: python3 tools/bench_startup.py [--reps 2] [--n 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import shutil
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_common import KPATCH, PY, goal, installed_env, loadavg, run_procs  # noqa: E402

HEAVY = ("numpy", "kpatch.rewrite.patcher", "kpatch.isa.bulk", "kpatch.analysis.engine")
PROBE = """
import sys
sys.argv = ["kpatch"] + sys.argv[1:]
from kpatch.cli import entry
try:
    entry()
except SystemExit:
    pass
print(" ".join(m for m in {heavy!r} if m in sys.modules) or "none", file=sys.stderr)
"""
COMMANDS = {"help": ["--help"], "explain": ["explain"], "rules": ["rules"], "scan-sample": ["scan", "@sample"]}
GOALS = {"help": 0.15, "explain": 0.15, "rules": 0.15, "scan-sample": 0.3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--n", type=int, default=5, help="invocations per command and repetition")
    a = ap.parse_args()
    pyc = tempfile.mkdtemp(prefix="kpatch-bench-pyc-")
    env = installed_env(pyc)
    cold = {k: v for k, v in env.items() if k != "PYTHONPYCACHEPREFIX"}
    cold["PYTHONDONTWRITEBYTECODE"] = "1"  # (the interpreter's own modules keep theirs)
    try:
        return _measure(a, env, cold, pyc)
    finally:
        shutil.rmtree(pyc, ignore_errors=True)


def _measure(a, env: dict, cold: dict, pyc: str) -> int:
    """The measurement of :func:`main`: ``env`` runs with bytecode in ``pyc``, ``cold`` without."""
    print(f"compared: each kpatch command against the bare interpreter, {a.n} invocations in a row, one "
          f"process at a time, with compiled bytecode (in {pyc}, filled by one untimed run); per "
          f"invocation: wall, CPU = user+sys")
    for name, args in COMMANDS.items():
        p = subprocess.run([PY, "-c", PROBE.format(heavy=HEAVY), *args], capture_output=True, text=True, env=env)
        print(f"  kpatch {' '.join(args)}: heavy modules imported: {p.stderr.strip().splitlines()[-1]}")
        subprocess.run([KPATCH, *args], stdout=subprocess.DEVNULL, env=env)
    worst = {k: 0.0 for k in COMMANDS}
    for rep in range(a.reps):
        print(f"rep {rep + 1}: {loadavg()}")
        for label, cmd in (("python -c pass", [PY, "-c", "pass"]),
                           ("python -c 'import numpy'", [PY, "-c", "import numpy"])):
            r = run_procs([cmd] * a.n, stdout_devnull=True, env=env)
            print(f"  {label:28s} wall {r.wall / a.n:6.3f} s  cpu {r.cpu / a.n:6.3f} s")
        for name, args in COMMANDS.items():
            r = run_procs([[KPATCH, *args]] * a.n, stdout_devnull=True, env=env)
            print(f"  kpatch {' '.join(args):21s} wall {r.wall / a.n:6.3f} s  cpu {r.cpu / a.n:6.3f} s")
            worst[name] = max(worst[name], r.cpu / a.n)
        print(f"  {loadavg()} after rep {rep + 1}")
    print("without kpatch's bytecode (its modules compiled at every start), for comparison:")
    for name, args in COMMANDS.items():
        r = run_procs([[KPATCH, *args]] * a.n, stdout_devnull=True, env=cold)
        print(f"  kpatch {' '.join(args):21s} wall {r.wall / a.n:6.3f} s  cpu {r.cpu / a.n:6.3f} s")
    for name, lim in GOALS.items():
        print(goal(f"start-up {name} cpu per invocation", worst[name], lim, " s") + "  (worst rep)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
