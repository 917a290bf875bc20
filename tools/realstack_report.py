#!/usr/bin/env python3
"""Coverage of the real ROCm stack: what kpatch reads, patches and refuses.

For each corpus it runs kpatch as a user would (`apply ... --json`, then
`scan --target gfx1010 --json` of the output, then `diff --json` of source
and output) and prints:

* objects read (and errors), kernels ok / patched / refused, with the
  refusal reasons as a histogram;
* findings left after patching (must be 0);
* the independent control-flow check of `kpatch diff` on every patched
  object (must be 0 problems), and once per run a deliberately corrupted
  copy (a branch offset changed) that the check must catch;
* the compiler's gfx1010 builds, scanned for gfx1010: findings there are
  false positives (must be 0);
* the mitigation instructions kpatch inserted (counted by llvm-objdump-16 in
  the source and the patched object) beside the compiler's own count (the
  same mnemonics in its gfx1010 build minus its gfx1030 build), where a
  gfx1010 build of the same code exists.

Corpora (each skipped when absent):
  rocblas   kdb_cache/sid-root/.../rocblas/4.4.1/library (tools/fetch_sid.sh)
  miopen    tests/fixtures/miopen/gfx10{30,10}.kdb (tools/build_miopen_kdb.py)
  rocrand   kdb_cache/root/.../librocrand.so.1.1 (tools/fetch_corpus.sh)
  rocsparse kdb_cache/root/.../librocsparse.so.0.1 (tools/fetch_corpus.sh --all; slow)

Not run in CI (the whole rocBLAS library takes tens of minutes on 2 cores);
`--limit N` takes the N smallest objects of each corpus.

    python3 tools/realstack_report.py [--corpus rocblas,miopen,rocrand] [--limit N] [--jobs N] [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ROCBLAS = os.path.join(ROOT, "kdb_cache", "sid-root", "usr", "lib", "x86_64-linux-gnu", "rocblas", "4.4.1", "library")
MIOPEN = os.path.join(ROOT, "tests", "fixtures", "miopen")
LIBDIR = os.path.join(ROOT, "kdb_cache", "root", "usr", "lib", "x86_64-linux-gnu")
#: Instructions inserted to avoid gfx1010 hazards (by kpatch's rules and by LLVM's hazard recognizer).
MITIGATIONS = ("s_nop", "v_nop", "s_waitcnt_depctr", "s_inst_prefetch", "s_mov_b32 vcc_lo", "v_mov_b32 v")
_INSN = re.compile(r"^\s+([a-z_0-9]+)(?: ([^/\n]*))?//", re.M)


def kpatch(*args: str, timeout: int = 7200) -> tuple[int, str, str]:
    env = dict(os.environ, KPATCH_NO_PROGRESS="1")
    p = subprocess.run([sys.executable, "-m", "kpatch", *args], capture_output=True, text=True, env=env,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


#: What each s_waitcnt_depctr immediate waits for (the hazard it mitigates, as LLVM inserts it).
DEPCTR = {"0xffe3": "vm_vsrc=0: VMEMtoScalarWrite", "0xfffe": "sa_sdst=0: VcmpxExecWAR"}


def mnemonics(path: str, mcpu: str) -> collections.Counter:
    """Counts of the mitigation instructions llvm-objdump-16 sees in a code object
    (s_waitcnt_depctr by immediate), and of v_cmpx: LLVM forms v_cmpx only for
    gfx10.3, so a gfx1010 build has none and needs no VcmpxExecWAR wait."""
    text = subprocess.run(["llvm-objdump-16", "-d", f"--mcpu={mcpu}", path], capture_output=True, text=True).stdout
    out: collections.Counter = collections.Counter()
    for m, ops in _INSN.findall(text):
        if m == "s_waitcnt_depctr":
            imm = (ops or "").strip()
            out[f"{m} {imm} ({DEPCTR[imm]})" if imm in DEPCTR else f"{m} {imm}"] += 1
        elif m in ("s_nop", "v_nop", "s_inst_prefetch"):
            out[m] += 1
        elif m.startswith("v_cmpx"):
            out["v_cmpx (not a mitigation)"] += 1
    return out


class Tally:
    def __init__(self, name: str):
        self.name = name
        self.objects = 0
        self.errors: list[str] = []
        self.kernels = collections.Counter()
        self.refusals = collections.Counter()
        self.left = 0
        self.cf_problems = 0
        self.patched_objects = 0
        self.inserted = collections.Counter()
        self.compiler = collections.Counter()
        self.compiler_pairs = 0
        self.kpatch_pairs = collections.Counter()
        self.gfx1010_objects = 0
        self.gfx1010_flagged: list[str] = []
        self.asm_flagged: list[str] = []
        self.seconds = 0.0

    def to_json(self) -> dict:
        return {k: (dict(v) if isinstance(v, collections.Counter) else v) for k, v in self.__dict__.items()}


def reason_class(reason: str) -> str:
    """A refusal reason without its addresses and names (for the histogram)."""
    r = re.sub(r"0x[0-9a-f]+", "ADDR", reason)
    r = re.sub(r"\(in [^)]*\)", "", r)
    r = re.sub(r"\bs\d+\b|s\[\d+:\d+\]|v\d+|v\[\d+:\d+\]", "REG", r)
    return r[:160]


def _json_of(t: Tally, src: str, *args: str) -> dict | None:
    """kpatch's --json document, or None with the failure recorded as an
    error of ``src`` (a check that did not run is never counted as passed)."""
    code, stdout, stderr = kpatch(*args)
    try:
        return json.loads(stdout)
    except ValueError:
        t.errors.append(f"{src}: {args[0]} exit {code}, no JSON: {stderr.strip()[-200:]}")
        return None


def patch_one(src: str, out: str, t: Tally, pair: str | None, mcpu_pair: bool) -> None:
    doc = _json_of(t, src, "apply", "--mode", "override", "--json", src, "-o", out)
    if doc is None:
        return
    for part in doc.get("parts", []):
        for k in part.get("kernels", []):
            t.kernels[k["status"]] += 1
            if k["status"] == "refused":
                t.refusals[reason_class(k.get("reason", ""))] += 1
    if not os.path.exists(out):
        return
    t.patched_objects += 1
    scan = _json_of(t, src, "scan", "--json", "--target", "gfx1010", out)
    if scan is None:
        return
    t.left += sum(len(k.get("findings") or []) for o in scan["code_objects"] for k in o["kernels"]
                  if k.get("verdict") != "unpatchable")
    diff = _json_of(t, src, "diff", "--json", src, out)
    if diff is None:
        return
    t.cf_problems += diff["summary"]["control_flow_problems"]
    if mcpu_pair:
        before, after = mnemonics(src, "gfx1030"), mnemonics(out, "gfx1030")
        t.inserted.update({m: after[m] - before[m] for m in set(after) | set(before)})
        if pair and os.path.exists(pair):
            gfx1010 = mnemonics(pair, "gfx1010")
            t.compiler.update({m: gfx1010[m] - before[m] for m in set(gfx1010) | set(before)})
            t.kpatch_pairs.update({m: after[m] - before[m] for m in set(after) | set(before)})
            t.compiler_pairs += 1


def scan_gfx1010(paths: list[str], t: Tally) -> None:
    if not paths:
        return
    doc = _json_of(t, "gfx1010 builds", "scan", "--json", "--target", "gfx1010", *paths)
    if doc is None:
        return
    t.gfx1010_objects += len(doc["code_objects"])
    for o in doc["code_objects"]:
        for k in o["kernels"]:
            if k.get("findings"):
                line = f"{o['uri']} {k['name']}: {', '.join(sorted({f.get('class', '?') for f in k['findings']}))}"
                # MIOpen's .s kernels are hand-written and assembled unchanged for gfx1010: real hazards,
                # not the compiler's output (kpatch apply --mode harden fixes them)
                (t.asm_flagged if "&args=" in o["uri"] and ".s.o&" in o["uri"] else t.gfx1010_flagged).append(line)


def corpus_rocblas(limit: int | None, jobs: int, tmp: str) -> Tally | None:
    if not os.path.isdir(ROCBLAS):
        return None
    t = Tally("rocBLAS 4.4.1 (Debian unstable librocblas4)")
    objs = [p for p in glob.glob(os.path.join(ROCBLAS, "*gfx1030*")) if not p.endswith(".dat")]
    objs.sort(key=os.path.getsize)
    if limit:
        objs = objs[:limit]
    t.objects = len(objs)

    def one(p: str) -> None:
        out = os.path.join(tmp, "rocblas-" + os.path.basename(p))
        pair = p.replace("gfx1030", "gfx1010")
        patch_one(p, out, t, pair if pair.endswith(".hsaco") else None, True)
        if os.path.exists(out):
            os.unlink(out)
        with lock:  # running totals on stderr: a run stopped part-way still leaves its figures
            done.append(p)
            print(f"   [{len(done)}/{len(objs)}] {os.path.basename(p)}: kernels so far {dict(t.kernels)}, "
                  f"refusals {sum(t.refusals.values())}, findings left {t.left}, control-flow problems "
                  f"{t.cf_problems}, errors {len(t.errors)}", file=sys.stderr, flush=True)

    lock, done = threading.Lock(), []

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, objs))
    scan_gfx1010(sorted(glob.glob(os.path.join(ROCBLAS, "*gfx1010*.hsaco"))), t)
    return t


def corpus_miopen(tmp: str) -> Tally | None:
    src = os.path.join(MIOPEN, "gfx1030.kdb")
    if not os.path.exists(src):
        return None
    from kpatch.containers.kdb import KernelDB

    t = Tally("MIOpen's kernels (tests/fixtures/miopen, built from MIOpen's sources)")
    out_dir = os.path.join(tmp, "miopen")
    doc = _json_of(t, src, "apply", "--db", src, "--mode", "override", "--cu", "18", "--out-dir", out_dir, "--json")
    if doc is None:
        return t
    t.objects = len(doc["entries"])
    t.errors += [f"{e['uri']}: {e['error']}" for e in doc["errors"]]
    for e in doc["entries"]:
        for k in e["kernels"]:
            t.kernels[k["status"]] += 1
            if k["status"] == "refused":
                t.refusals[reason_class(k.get("reason", ""))] += 1
    out = doc["output"]
    scan = _json_of(t, out, "scan", "--json", "--target", "gfx1010", out) if os.path.exists(out) else None
    diff = _json_of(t, out, "diff", "--json", src, out) if scan is not None else None
    if diff is not None:
        t.patched_objects = len(scan["code_objects"])
        t.left = sum(len(k.get("findings") or []) for o in scan["code_objects"] for k in o["kernels"]
                     if k.get("verdict") != "unpatchable")
        t.cf_problems = diff["summary"]["control_flow_problems"]
        # mitigations: per key, source vs patched, and the gfx1010 build of the same key
        g1010 = os.path.join(MIOPEN, "gfx1010.kdb")
        with KernelDB.open(src) as a, KernelDB.open(out) as b, KernelDB.open(g1010) as c:
            for e in a.entries():
                new = b.get(e.kernel_name, e.kernel_args)
                if new is None:
                    continue
                files = {}
                for tag, blob in (("src", e.code()), ("out", new.code())):
                    files[tag] = os.path.join(tmp, f"mi-{tag}.hsaco")
                    open(files[tag], "wb").write(blob)
                before, after = mnemonics(files["src"], "gfx1030"), mnemonics(files["out"], "gfx1030")
                t.inserted.update({m: after[m] - before[m] for m in set(after) | set(before)})
                twin = c.get(e.kernel_name, e.kernel_args[: -len("gfx1030")] + "gfx1010")
                if twin is not None and "Winograd" not in e.kernel_name:  # assembly: no compiler mitigations
                    open(files["src"] + ".1010", "wb").write(twin.code())
                    g = mnemonics(files["src"] + ".1010", "gfx1010")
                    t.compiler.update({m: g[m] - before[m] for m in set(g) | set(before)})
                    t.kpatch_pairs.update({m: after[m] - before[m] for m in set(after) | set(before)})
                    t.compiler_pairs += 1
    scan_gfx1010([os.path.join(MIOPEN, "gfx1010.kdb")], t)
    return t


def corpus_hostlib(name: str, path: str, tmp: str) -> Tally | None:
    if not os.path.exists(path):
        return None
    t = Tally(f"{name} (Debian bookworm, {os.path.basename(path)})")
    out = os.path.join(tmp, os.path.basename(path))
    # as a user would: a bundle that grew keeps only its host/gfx1030/gfx1010 entries
    doc = _json_of(t, path, "apply", "--mode", "override", "--json", "--drop-other-targets", path, "-o", out)
    if doc is None:
        return t
    t.objects = len(doc.get("parts", []))
    t.errors += [f"{e['uri']}: {e['error']}" for e in doc.get("errors", [])]
    for part in doc.get("parts", []):
        for k in part.get("kernels", []):
            t.kernels[k["status"]] += 1
            if k["status"] == "refused":
                t.refusals[reason_class(k.get("reason", ""))] += 1
    if os.path.exists(out):
        t.patched_objects = 1
        scan = _json_of(t, out, "scan", "--json", "--target", "gfx1010", out)
        diff = _json_of(t, out, "diff", "--json", path, out) if scan is not None else None
        if diff is not None:
            t.left = sum(len(k.get("findings") or []) for o in scan["code_objects"]
                         if o["target"].startswith("gfx1030")
                         for k in o["kernels"] if k.get("verdict") != "unpatchable")
            t.cf_problems = diff["summary"]["control_flow_problems"]
        os.unlink(out)
    return t


def corrupted_copy_is_caught(tmp: str) -> str:
    """Patch a fixture, change one branch offset in the patched copy, and
    check that `kpatch diff` reports a control-flow problem."""
    src = os.path.join(ROOT, "tests", "fixtures", "bin", "asm_kernels.s.gfx1030.v4.hsaco")
    out = os.path.join(tmp, "selfcheck.hsaco")
    kpatch("apply", "--mode", "override", src, "-o", out)
    if not os.path.exists(out):
        return "self-check skipped: the fixture did not patch"
    data = bytearray(open(out, "rb").read())
    text = subprocess.run(["llvm-objdump-16", "-d", "--mcpu=gfx1030", out], capture_output=True, text=True).stdout
    m = re.search(r"s_cbranch_scc1 \d+\s+// ([0-9A-F]+): ([0-9A-F]{8})", text)
    off = int(m.group(1), 16)
    from kpatch.codeobject import CodeObject

    co = CodeObject.from_bytes(bytes(data))
    at = off - co.text_vaddr + co.text_offset
    data[at] = (data[at] + 1) & 0xFF  # the branch now lands one dword further
    bad = os.path.join(tmp, "selfcheck-corrupt.hsaco")
    open(bad, "wb").write(bytes(data))
    _, stdout, stderr = kpatch("diff", "--json", src, bad)
    try:
        n = json.loads(stdout)["summary"]["control_flow_problems"]
    except (ValueError, KeyError):
        return f"control-flow check on a deliberately corrupted copy: did not run ({stderr.strip()[-200:]})"
    return f"control-flow check on a deliberately corrupted copy: {n} problem(s) found ({'ok' if n else 'MISSED'})"


def show(t: Tally) -> None:
    print(f"== {t.name}  ({t.seconds:.0f} s)")
    k = t.kernels
    print(f"   objects {t.objects} read, {len(t.errors)} errors; kernels: {k['patched']} patched, "
          f"{k['refused']} refused, {k['untouched']} untouched; {t.patched_objects} patched objects written")
    print(f"   findings left after patching: {t.left}    control-flow problems (kpatch diff): {t.cf_problems}")
    if t.gfx1010_objects:
        print(f"   compiler's gfx1010 builds: {t.gfx1010_objects} objects, kernels with findings: "
              f"{len(t.gfx1010_flagged)}")
        for f in t.gfx1010_flagged[:10]:
            print(f"      {f}")
        if t.asm_flagged:
            print(f"   hand-written assembly assembled for gfx1010 (real hazards, not compiler output; "
                  f"`apply --mode harden` fixes them): {len(t.asm_flagged)} kernels")
    if t.refusals:
        print("   refusals:")
        for r, n in t.refusals.most_common():
            print(f"      {n:6d}  {r}")
    if t.inserted:
        ins = ", ".join(f"{m} {n:+d}" for m, n in sorted(t.inserted.items()) if n)
        print(f"   inserted by kpatch (llvm-objdump counts, patched - source): {ins or 'none'}")
    if t.compiler_pairs:
        comp = ", ".join(f"{m} {n:+d}" for m, n in sorted(t.compiler.items()) if n)
        mine = ", ".join(f"{m} {n:+d}" for m, n in sorted(t.kpatch_pairs.items()) if n)
        print(f"   on the {t.compiler_pairs} objects with a gfx1010 build: kpatch {mine or 'none'}; "
              f"compiler (gfx1010 - gfx1030 build) {comp or 'none'}")
    for e in t.errors[:10]:
        print(f"   error: {e}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="rocblas,miopen,rocrand",
                    help="comma-separated: rocblas, miopen, rocrand, rocsparse")
    ap.add_argument("--limit", type=int, help="only the N smallest objects of the rocBLAS library")
    ap.add_argument("--jobs", type=int, default=2, help="objects patched at once (rocBLAS)")
    ap.add_argument("--json", help="also write the figures to this file")
    a = ap.parse_args()
    wanted = set(a.corpus.split(","))
    tallies = []
    with tempfile.TemporaryDirectory(prefix="kpatch-realstack-") as tmp:
        print(corrupted_copy_is_caught(tmp))
        runs = [("rocblas", lambda: corpus_rocblas(a.limit, a.jobs, tmp)), ("miopen", lambda: corpus_miopen(tmp)),
                ("rocrand", lambda: corpus_hostlib("rocRAND", os.path.join(LIBDIR, "librocrand.so.1.1"), tmp)),
                ("rocsparse", lambda: corpus_hostlib("rocSPARSE", os.path.join(LIBDIR, "librocsparse.so.0.1"), tmp))]
        for key, run in runs:
            if key not in wanted:
                continue
            start = time.monotonic()
            t = run()
            if t is None:
                print(f"== {key}: not present (see the module doc for how to fetch it)")
                continue
            t.seconds = time.monotonic() - start
            show(t)
            tallies.append(t)
    if a.json:
        with open(a.json, "w") as f:
            json.dump([t.to_json() for t in tallies], f, indent=1)
    bad = any(t.left or t.cf_problems or t.gfx1010_flagged for t in tallies)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
