#!/usr/bin/env python3
"""Benchmark of the load-time hook (not run in CI).

    python tools/bench_hook.py [--objects N] [--mb SIZE] [--reps 2]

Measures, in one run, --reps times (each repetition with the load average
before and after; wall and CPU = user+sys, of this process or of the
patcher's processes; everything single-threaded, one against one):
  1. the content key's throughput (kpatch_object_key through ctypes on a
     SIZE MB buffer) next to copying the same bytes once (ctypes.memmove: reading
     the object from memory) and hashlib.md5 of them;   goal: >= 1 GB/s
  2. the hook's cost per cache hit: the real hook library, OnLoad on an
     HsaApiTable built here with ctypes, then hsa_code_object_reader_create_from_memory
     through the table on objects already in the cache (key, record, mmap and
     key check of the .co, log line), minus the same call to the stand-in
     alone; as time per object and as a multiple of copying the object once;
     goal: < 1 ms
  3. first-time patch throughput (cache.patch_into_cache, what the patcher
     runs) on the largest corpus objects: librocrand's gfx1030 code object and
     the largest MIOpen objects of tests/fixtures/miopen/gfx1030.kdb, in MB/s
     and through the patcher subprocess (with Python's start-up), with its peak
     memory (max RSS of the child)
  4. peak memory (max RSS) of this process after all of it.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tools"))

from bench_common import loadavg  # noqa: E402

from kpatch.delivery import cache  # noqa: E402
from kpatch.delivery.hooklib import hook_library_path, object_key  # noqa: E402

LIBROCRAND = os.path.join(ROOT, "kdb_cache", "root", "usr", "lib", "x86_64-linux-gnu", "librocrand.so.1.1")
MIOPEN_KDB = os.path.join(ROOT, "tests", "fixtures", "miopen", "gfx1030.kdb")
N_CORE_FIELDS = 125  # CoreApiTable entries (kpatch_hsa_table.h)
FROM_MEMORY_INDEX = 116  # hsa_code_object_reader_create_from_memory_fn, 0-based after the version


class Version(ctypes.Structure):
    _fields_ = [("major_id", ctypes.c_uint32), ("minor_id", ctypes.c_uint32), ("step_id", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


class Core(ctypes.Structure):
    _fields_ = [("version", Version), ("fn", ctypes.c_void_p * N_CORE_FIELDS)]


class Root(ctypes.Structure):
    _fields_ = [("version", Version), ("core_", ctypes.POINTER(Core)), ("amd_ext_", ctypes.c_void_p),
                ("finalizer_ext_", ctypes.c_void_p), ("image_ext_", ctypes.c_void_p)]


FromMemory = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


def best(fn, repeat: int = 5) -> tuple[float, float]:
    """(least wall, least CPU) seconds of ``repeat`` calls of ``fn``."""
    walls, cpus = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


def gfx1030_objects(limit: int) -> list[tuple[str, bytes]]:
    """The largest gfx1030 code objects of the corpus."""
    objs: list[tuple[str, bytes]] = []
    if os.path.exists(LIBROCRAND):
        from kpatch.containers.bundle import parse_bundle
        from kpatch.containers.hostelf import find_fatbin_bundles

        for b in find_fatbin_bundles(LIBROCRAND):
            with open(LIBROCRAND, "rb") as f:
                bundle = os.pread(f.fileno(), b.size, b.offset)
            for e in parse_bundle(bundle):
                if e.target_id.endswith("gfx1030"):
                    objs.append((f"librocrand {e.id}", bytes(e.data(bundle))))
    from kpatch.containers.kdb import KernelDB

    kdb = KernelDB.open(MIOPEN_KDB)
    try:
        mi = sorted(((e.kernel_name, e.code()) for e in kdb.entries()), key=lambda x: -len(x[1]))
    finally:
        kdb.close()
    seen = set()
    for name, data in mi:
        if name not in seen:
            seen.add(name)
            objs.append((f"MIOpen {name}", data))
    return objs[:limit]


#: runs a command from a small fresh interpreter and prints its exit status and
#: peak RSS (KiB): a child forked straight from this big process would count
#: the pages it inherited before exec in its ru_maxrss (Linux keeps the
#: pre-exec high-water mark), so the patcher's own peak could not be seen
_LAUNCH = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]).returncode; "
           "u = resource.getrusage(resource.RUSAGE_CHILDREN); print(r, u.ru_maxrss, u.ru_utime + u.ru_stime)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--objects", type=int, default=4, help="corpus objects to patch (largest first)")
    ap.add_argument("--mb", type=int, default=256, help="buffer size for the key throughput")
    ap.add_argument("--reps", type=int, default=2, help="repetitions, each in a fresh process")
    ap.add_argument("--one-rep", action="store_true", help=argparse.SUPPRESS)  # (a repetition's process)
    a = ap.parse_args()
    if a.one_rep:
        one_rep(a, gfx1030_objects(a.objects))
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"4. peak memory (max RSS) of this repetition's process: {peak:.0f} MiB (the {a.mb} MiB key buffers, "
              "every MIOpen object of the kdb decoded, in-process patching; the patcher's own is in 3.)")
        return 0
    print("compared (one thread each, in one process unless said): the content key against one memmove and md5 "
          "of the same buffer; a cache hit through the real hook against the stand-in reader alone and one copy "
          "of the object; first-time patching in process and through the patcher subprocess the hook spawns; "
          "each repetition in a fresh process")
    for rep in range(a.reps):
        print(f"rep {rep + 1}: {loadavg()}", flush=True)
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--one-rep", "--objects", str(a.objects),
                            "--mb", str(a.mb)])
        if r.returncode:
            return r.returncode
        print(f"  {loadavg()} after rep {rep + 1}", flush=True)
    return 0


def one_rep(a, objs) -> None:
    """Parts 1-3 once."""
    # 1. key throughput vs one copy and md5
    size = a.mb << 20
    buf = os.urandom(1 << 20) * a.mb
    dst = ctypes.create_string_buffer(size)
    t_key, c_key = best(lambda: object_key(buf))
    t_copy, c_copy = best(lambda: ctypes.memmove(dst, buf, size))
    t_md5, c_md5 = best(lambda: hashlib.md5(buf).digest(), repeat=2)
    mbs = lambda t: size / t / 1e6  # noqa: E731
    print(f"1. key on {a.mb} MiB: {mbs(t_key):,.0f} MB/s wall, {mbs(c_key):,.0f} MB/s cpu (goal >= 1000); one copy "
          f"(memmove) {mbs(t_copy):,.0f} / {mbs(c_copy):,.0f} MB/s; md5 {mbs(t_md5):,.0f} / {mbs(c_md5):,.0f} MB/s; "
          f"key/copy time ratio {t_key / t_copy:.2f} wall {c_key / c_copy:.2f} cpu, md5/key {t_md5 / t_key:.1f} wall "
          f"{c_md5 / c_key:.1f} cpu", flush=True)
    buf = dst = None  # (the buffers' memory back before patching)

    with tempfile.TemporaryDirectory() as tmp:
        cdir = os.path.join(tmp, "cache")
        # 3. first-time patch throughput
        total_bytes, total_t, total_c = 0, 0.0, 0.0
        rows = []
        for name, data in objs:
            t, c = time.perf_counter(), time.process_time()
            rec = cache.patch_into_cache(data, "override", cdir)
            dt, dc = time.perf_counter() - t, time.process_time() - c
            total_bytes += len(data)
            total_t += dt
            total_c += dc
            rows.append(f"   {len(data) / 1e6:7.3f} MB {dt:7.2f} s wall {dc:7.2f} s cpu {len(data) / dt / 1e6:6.2f} "
                        f"MB/s  {rec.status:8} {name[:70]}")
        print(f"3. first-time patch (cache.patch_into_cache, in process) of {len(objs)} objects: "
              f"{total_bytes / total_t / 1e6:.2f} MB/s wall, {total_bytes / total_c / 1e6:.2f} MB/s cpu overall "
              f"(the objects one after another, in this fresh process)")
        print("\n".join(rows))
        print("   the same through the patcher the hook spawns (python -m kpatch.delivery.patcher, fresh cache):")
        for i, (name, data) in enumerate(objs):
            path = os.path.join(tmp, f"in{i}")
            with open(path, "wb") as f:
                f.write(data)
            cmd = [sys.executable, "-m", "kpatch.delivery.patcher", "--cache", os.path.join(tmp, "c2"),
                   "--mode", "override", "--key", object_key(data), path]
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-c", _LAUNCH, *cmd], capture_output=True, text=True)
            dt = time.perf_counter() - t
            status, peak, cpu = p.stdout.split()
            print(f"   {len(data) / 1e6:7.3f} MB {dt:7.2f} s wall {float(cpu):7.2f} s cpu "
                  f"{len(data) / dt / 1e6:6.2f} MB/s  peak RSS {int(peak) / 1024:.0f} MiB  exit {status}  {name[:50]}")

        # 2. cache-hit cost through the real hook
        os.environ.update(KPATCH_CACHE_DIR=cdir, KPATCH_LOG=os.path.join(tmp, "log.jsonl"))
        for k in ("KPATCH_PYTHON", "KPATCH_STRICT", "KPATCH_MODE", "KPATCH_TIMEOUT", "KPATCH_DEBUG"):
            os.environ.pop(k, None)
        lib = ctypes.CDLL(hook_library_path())
        lib.OnLoad.restype = ctypes.c_bool
        lib.OnLoad.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p]
        stand = FromMemory(lambda p, n, r: 0)
        core = Core()
        core.version = Version(1, ctypes.sizeof(Core), 0, 0)
        core.fn[FROM_MEMORY_INDEX] = ctypes.cast(stand, ctypes.c_void_p).value
        root = Root(Version(1, ctypes.sizeof(Root), 0, 0), ctypes.pointer(core))
        assert lib.OnLoad(ctypes.byref(root), 1, 0, None), "OnLoad refused the table"
        hooked = FromMemory(core.fn[FROM_MEMORY_INDEX])
        reader = ctypes.c_uint64()
        print("2. cache hit through the hook (from_memory, log line on), per object (wall; cpu):")
        for name, data in objs:
            cbuf = ctypes.create_string_buffer(data, len(data))
            n = 200
            dst1 = ctypes.create_string_buffer(len(data))
            hook = best(lambda: [hooked(cbuf, len(data), ctypes.byref(reader)) for _ in range(n)])
            base = best(lambda: [stand(cbuf, len(data), ctypes.byref(reader)) for _ in range(n)])
            copy = best(lambda: [ctypes.memmove(dst1, cbuf, len(data)) for _ in range(n)])
            cost = [(h - b) / n for h, b in zip(hook, base)]
            per_copy = [c / n for c in copy]
            print(f"   {len(data) / 1e6:7.3f} MB: {cost[0] * 1e3:.3f} ms; {cost[1] * 1e3:.3f} ms (goal < 1 ms) = "
                  f"{cost[0] / per_copy[0]:.1f}; {cost[1] / max(per_copy[1], 1e-9):.1f} x one copy "
                  f"({per_copy[0] * 1e3:.3f}; {per_copy[1] * 1e3:.3f} ms)  {name[:60]}")
        with open(os.environ["KPATCH_LOG"]) as f:
            actions = {line.split('"action": "')[1].split('"')[0] for line in f if '"from_memory"' in line}
        print(f"   actions logged: {sorted(actions)}")


if __name__ == "__main__":
    sys.exit(main())
