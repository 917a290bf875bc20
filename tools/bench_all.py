#!/usr/bin/env python3
"""Every speed and memory goal of issue 14 from one run (not a test).

Runs, one after the other in this run, each fair bench of tools/ with
--reps (default 2): bench_startup, bench_disasm, bench_analysis,
bench_apply, bench_scan.  Each bench's own output goes to the terminal as it
comes (what it compared, every repetition with its load average); at the
end the ``goal ...`` lines all of them printed are repeated together, with
the wall time of each bench, so one run shows every goal's ratio.

A bench whose corpus is missing says so in its own output (fetch it with
tools/fetch_corpus.sh --all, tools/fetch_sid.sh and
tools/build_corpus_kdb.py); a bench that fails is named in the summary and
the exit status is 1.

    python3 tools/bench_all.py [--reps 2] [--only startup,disasm,analysis,apply,scan]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = ("startup", "disasm", "analysis", "apply", "scan")


def run_one(name: str, reps: int) -> tuple[int, float, list[str]]:
    """(exit status, wall seconds, goal lines) of ``tools/bench_NAME.py --reps REPS``, its output echoed."""
    t = time.monotonic()
    p = subprocess.Popen([sys.executable, os.path.join(HERE, f"bench_{name}.py"), "--reps", str(reps)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    goals = []
    assert p.stdout is not None
    for line in p.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if line.startswith("goal "):
            goals.append(line.rstrip("\n"))
    return p.wait(), time.monotonic() - t, goals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=2, help="repetitions inside each bench")
    ap.add_argument("--only", default=",".join(BENCHES), help="comma-separated subset of " + ",".join(BENCHES))
    a = ap.parse_args()
    chosen = [b.strip() for b in a.only.split(",") if b.strip()]
    unknown = [b for b in chosen if b not in BENCHES]
    if unknown:
        print(f"error: --only: no such bench: {', '.join(unknown)} (known: {', '.join(BENCHES)})", file=sys.stderr)
        return 2
    summary = []
    failed = []
    for name in chosen:
        print(f"=== tools/bench_{name}.py --reps {a.reps} (load {os.getloadavg()[0]:.2f}) ===", flush=True)
        rc, wall, goals = run_one(name, a.reps)
        summary.append((name, rc, wall, goals))
        if rc != 0:
            failed.append(name)
    print("\n=== every goal, from this run ===")
    for name, rc, wall, goals in summary:
        status = "" if rc == 0 else f"  (exit {rc})"
        print(f"bench_{name}.py: {wall:.0f} s wall{status}")
        for g in goals or ["  (printed no goal line)"]:
            print(f"  {g}")
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
