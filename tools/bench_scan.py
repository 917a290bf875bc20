#!/usr/bin/env python3
"""Benchmark `kpatch scan` of the 1.3 GB librocsparse and the peak memory of
scan and apply, fairly (not a test).

    python tools/bench_scan.py [--baseline REV] [--reps 2] [--no-apply]

--reps times, in the same run, one process against one:
  * reference: `kpatch scan librocsparse.so.0.1` as kpatch was at --baseline
    (default: the commit issue 14 was measured on), run from `git archive`
    of that commit in a temporary directory with this Python;
  * `kpatch scan librocsparse.so.0.1` as it is now;
and once: `kpatch apply` of the largest Tensile gfx1030 object of rocBLAS
4.4.1 (tools/fetch_sid.sh) into a temporary file.  Prints wall and CPU time
(user+sys of each process), peak RSS of each process, the load average per
repetition, and the goals: scan <= 0.5x the baseline's CPU; peak RSS under
1 GiB per process.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_common import KPATCH, PY, SPARSE, TENSILE, goal, line, loadavg, run_procs  # noqa: E402

BASELINE = "adeb2e3c30d85965f78c5052195db8649b6c293b"  # issue 14's figures were measured here
GIB = 1024 * 1024  # KiB


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default=BASELINE, help="git revision of the reference kpatch")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--no-apply", action="store_true")
    a = ap.parse_args()
    if not os.path.exists(SPARSE):
        sys.exit(f"{SPARSE} is missing: run tools/fetch_corpus.sh --all")
    with tempfile.TemporaryDirectory(prefix="kpatch-bench-") as tmp:
        base = os.path.join(tmp, "baseline")
        os.mkdir(base)
        tar = subprocess.run(["git", "-C", ROOT, "archive", a.baseline, "kpatch", "rules"], check=True,
                             capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", base], input=tar, check=True)
        # the baseline's package data: its rules live in rules/, shipped as kpatch.rules_data
        os.symlink(os.path.join(base, "rules"), os.path.join(base, "kpatch", "rules_data"))
        env = dict(os.environ, PYTHONPATH=base)
        # (run from the baseline's directory: `python -m` puts the working directory first on sys.path)
        probe = subprocess.run([PY, "-c", "import kpatch; print(kpatch.__file__)"], env=env, capture_output=True,
                               text=True, check=True, cwd=base).stdout.strip()
        if not probe.startswith(base):
            sys.exit(f"the baseline kpatch is not the one imported ({probe})")
        print(f"librocsparse.so.0.1 ({os.path.getsize(SPARSE) / 1e9:.2f} GB); compared: kpatch scan now against "
              f"kpatch scan at {a.baseline[:10]} ({probe}), one process each; CPU = user+sys, peak = RSS")
        ratios, peaks = [], []
        for rep in range(a.reps):
            print(f"rep {rep + 1}: {loadavg()}")
            ref = run_procs([[PY, "-m", "kpatch", "scan", SPARSE]], stdout_devnull=True, env=env, cwd=base)
            now = run_procs([[KPATCH, "scan", SPARSE]], stdout_devnull=True)
            print(line(f"kpatch scan at {a.baseline[:10]}", ref))
            print(line("kpatch scan now", now, ref))
            ratios.append(now.cpu / ref.cpu)
            peaks.append(now.peak_kib)
            print(f"  {loadavg()} after rep {rep + 1}")
        print(goal("scan librocsparse cpu vs baseline", max(ratios), 0.5)
              + f"  (reps: {', '.join(f'{x:.3f}' for x in ratios)}; worst shown)")
        print(goal("scan librocsparse peak RSS", max(peaks) / GIB, 1.0, " GiB"))
        tensile = sorted(glob.glob(os.path.join(TENSILE, "TensileLibrary_*gfx1030.co")), key=os.path.getsize)
        if a.no_apply:
            pass
        elif not tensile:
            print(f"no Tensile gfx1030 object under {TENSILE} (tools/fetch_sid.sh): apply not measured")
        else:
            big = tensile[-1]
            print(f"apply: {os.path.basename(big)} ({os.path.getsize(big) / 1e6:.1f} MB), {loadavg()}")
            r = run_procs([[KPATCH, "apply", "--mode", "override", big, "-o", os.path.join(tmp, "out.co")]],
                          stdout_devnull=True, check=False)
            print(line("kpatch apply --mode override FILE -o OUT", r))
            print(goal("apply largest Tensile object peak RSS", r.peak_kib / GIB, 1.0, " GiB"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
