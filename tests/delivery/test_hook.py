"""The load-time hook, driven as ROCr drives it (tests/delivery/harness.cpp).

Real gfx1030 objects (MIOpen kernels from tests/fixtures/miopen, librocrand's
gfx1030 code object) go through the replaced CoreApiTable entries; what the
runtime's stand-in receives must be what `kpatch apply FILE -o OUT --mode
override` writes for the same object (run here as the CLI, the oracle), or
the original where apply writes nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from kpatch.containers.kdb import KernelDB
from kpatch.delivery import cache
from kpatch.delivery.hooklib import hook_library_path, object_key

from .hook_harness import LIBROCRAND, MIOPEN, build_harness, counting_python, parse, spawns

# MIOpen kernels: Winograd fp32 (findings, patched), softmax (patched), Winograd fp16 dot2
# (v_dot2_f32_f16, which gfx1010 lacks: refused), neuron (no findings: safe)
PICK = {"wino": ("gfx1030.kdb", "Conv_Winograd_v30_3_1_fp32_f2x3_stride1.s.o"),
        "softmax": ("gfx1030.kdb", "MIOpenSoftmax.cl.o"),
        "dot2": ("gfx1030.kdb", "Conv_Winograd_v30_3_1_fp16_dot2_f2x3_stride1.s.o"),
        "neuron": ("gfx1030.kdb", "MIOpenNeuron.cl.o"),
        "gfx1010": ("gfx1010.kdb", "MIOpenNeuron.cl.o")}


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, KPATCH_NO_PROGRESS="1")
    env.pop("KPATCH_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "kpatch", *args], capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The harness, the objects as files, and what `kpatch apply` makes of each."""
    d = tmp_path_factory.mktemp("hook")
    exe = build_harness(str(d))
    objs: dict[str, str] = {}
    for name, (db, kernel) in PICK.items():
        kdb = KernelDB.open(os.path.join(MIOPEN, db))
        try:
            entry = next(e for e in kdb.entries() if e.kernel_name == kernel)
            (d / f"{name}.co").write_bytes(entry.code())
        finally:
            kdb.close()
        objs[name] = str(d / f"{name}.co")
    if os.path.exists(LIBROCRAND):
        out = d / "rocrand.co"
        # the fat binary's gfx1030 entry
        from kpatch.containers.bundle import parse_bundle
        from kpatch.containers.hostelf import find_fatbin_bundles

        b = find_fatbin_bundles(LIBROCRAND)[0]
        with open(LIBROCRAND, "rb") as f:
            bundle = os.pread(f.fileno(), b.size, b.offset)
        e = next(e for e in parse_bundle(bundle) if e.target_id.endswith("gfx1030"))
        out.write_bytes(bytes(e.data(bundle)))
        objs["rocrand"] = str(out)
    (d / "junk.bin").write_bytes(b"not a code object at all " * 8)
    with open("/bin/true", "rb") as f:  # an x86-64 ELF: not AMDGPU
        (d / "x86.bin").write_bytes(f.read(8192))
    objs["junk"], objs["x86"] = str(d / "junk.bin"), str(d / "x86.bin")
    expected: dict[str, bytes] = {}
    for name, path in objs.items():
        original = open(path, "rb").read()
        if name in ("junk", "x86", "gfx1010"):
            expected[name] = original
            continue
        out = d / f"{name}.apply.co"
        r = _run_cli("apply", path, "-o", str(out), "--mode", "override")
        assert r.returncode in (0, 1), r.stderr
        expected[name] = out.read_bytes() if out.exists() else original
    # the oracle itself: what these objects are known to be
    assert expected["wino"] != open(objs["wino"], "rb").read()
    assert expected["softmax"] != open(objs["softmax"], "rb").read()
    assert expected["dot2"] == open(objs["dot2"], "rb").read()  # refused: apply writes nothing
    assert expected["neuron"] == open(objs["neuron"], "rb").read()
    return {"dir": d, "exe": exe, "objs": objs, "expected": expected, "hook": hook_library_path()}


def harness(world, tmp, loads: list[str], *, env: dict | None = None, args: tuple = (), cache_dir=None,
            timeout: float = 120, popen: bool = False):
    out = tmp / f"out-{time.monotonic_ns()}"
    out.mkdir()
    log = str(out / "log.jsonl")
    e = {k: v for k, v in os.environ.items() if not k.startswith("KPATCH_")}
    e.update(KPATCH_CACHE_DIR=str(cache_dir or tmp / "cache"), KPATCH_LOG=log)
    e.update(env or {})
    e = {k: v for k, v in e.items() if v is not None}
    argv = [world["exe"], world["hook"], str(out), *args,
            *[f"{api}:{world['objs'][name]}" for api, name in (s.split(":") for s in loads)]]
    if popen:
        return subprocess.Popen(argv, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), log
    r = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return parse(r.stdout, r.stderr, log)


def test_objects_arrive_as_apply_writes_them_and_second_load_is_a_cache_hit(world, tmp_path):
    count = str(tmp_path / "count")
    py = counting_python(str(tmp_path / "py"), count)
    loads = ["memory:wino", "file:softmax", "memory:dot2", "deserialize:neuron", "memory:gfx1010",
             "memory:junk", "file:x86", "deserialize:wino", "memory:softmax"]
    if "rocrand" in world["objs"]:
        loads.append("memory:rocrand")
    run = harness(world, tmp_path, loads, env={"KPATCH_PYTHON": py})
    assert run.onload == {"ok": True, "table": "changed", "memory": "hooked", "file": "hooked",
                          "deserialize": "hooked"}
    for spec, load in zip(loads, run.loads):
        name = spec.split(":")[1]
        assert load.status == 0, spec
        assert load.received == world["expected"][name], spec
    distinct = {s.split(":")[1] for s in loads} - {"gfx1010", "junk", "x86"}
    assert spawns(count) == len(distinct)
    # one mapping per distinct patched object, however often it is loaded
    assert run.stats["mapped"] == len(distinct - {"dot2", "neuron"})
    actions = [(e["api"], e["action"], e["cache"]) for e in run.objects()]
    assert actions[:9] == [("from_memory", "patched", "miss"), ("from_file", "patched", "miss"),
                           ("from_memory", "refused", "miss"), ("deserialize", "safe", "miss"),
                           ("from_memory", "other-target", None), ("from_memory", "not-amdgpu", None),
                           ("from_file", "not-amdgpu", None), ("deserialize", "patched", "hit"),
                           ("from_memory", "patched", "hit")]
    wino = run.objects()[0]
    assert wino["key"] == object_key(open(world["objs"]["wino"], "rb").read())
    assert wino["target"] == "gfx1030" and wino["size"] == os.path.getsize(world["objs"]["wino"])
    assert set(wino) == {"time", "pid", "api", "key", "size", "target", "action", "cache", "ms", "reason"}
    # the records say what happened, with the kernels
    rec = cache.read_record(str(tmp_path / "cache"), wino["key"], "override")
    assert rec.status == "patched" and rec.target == "gfx1030" and rec.kernels
    dot2 = cache.read_record(str(tmp_path / "cache"), run.objects()[2]["key"], "override")
    assert dot2.status == "refused" and "dot2" in dot2.reason and dot2.co_path is None

    # second process, same cache: every object is a hit, no patcher runs
    again = harness(world, tmp_path, loads, env={"KPATCH_PYTHON": py})
    assert spawns(count) == len(distinct)
    assert [l.received for l in again.loads] == [l.received for l in run.loads]
    assert all(e["cache"] == "hit" for e in again.objects() if e["action"] not in ("other-target", "not-amdgpu"))


def test_strict_refuses_refused_objects_and_loads_patched_ones(world, tmp_path):
    c = str(tmp_path / "cache")
    for name in ("dot2", "wino"):
        cache.patch_into_cache(open(world["objs"][name], "rb").read(), "override", c)
    run = harness(world, tmp_path, ["memory:dot2", "file:dot2", "deserialize:dot2", "memory:wino"],
                  env={"KPATCH_STRICT": "1"})
    for load in run.loads[:3]:
        assert load.status == 0x1010 and load.received is None  # HSA_STATUS_ERROR_INVALID_CODE_OBJECT
    assert run.loads[3].status == 0 and run.loads[3].received == world["expected"]["wino"]
    assert [e["action"] for e in run.objects()] == ["refused", "refused", "refused", "patched"]
    assert "KPATCH_STRICT" in run.objects()[0]["reason"]


@pytest.mark.parametrize("args, why", [
    (("--table-major", "0"), "HsaApiTable major_id 0"),
    (("--table-major", "4"), "HsaApiTable major_id 4"),
    (("--core-major", "3"), "CoreApiTable major_id 3"),
    (("--core-minor", "936"), "too small"),  # ends before hsa_code_object_reader_create_from_memory_fn (944..952)
    (("--table-minor", "16"), "too small to hold core_"),
    (("--no-core",), "no CoreApiTable"),
])
def test_a_table_the_hook_does_not_know_is_left_alone(world, tmp_path, args, why):
    run = harness(world, tmp_path, ["memory:wino"], args=args)
    assert run.onload["ok"] is False and run.onload["table"] == "unchanged"
    assert run.log[0]["api"] == "OnLoad" and run.log[0]["action"] == "error" and why in run.log[0]["reason"]
    assert "kpatch: the load-time hook is not active" in run.stderr
    assert run.loads[0].received == open(world["objs"]["wino"], "rb").read()  # straight to the runtime
    assert run.objects() == []


@pytest.mark.parametrize("args", [("--table-major", "3", "--core-major", "2"),  # ROCm 6.x / 7.x values
                                  ("--core-minor", "952")])  # exactly up to from_memory: the three slots exist
def test_tables_the_hook_knows_are_hooked(world, tmp_path, args):
    run = harness(world, tmp_path, ["memory:junk"], args=args)
    assert run.onload["ok"] is True and run.onload["memory"] == "hooked"
    assert run.objects()[0]["action"] == "not-amdgpu"


def test_threads_and_processes_patch_each_object_once_and_agree(world, tmp_path):
    count = str(tmp_path / "count")
    py = counting_python(str(tmp_path / "py"), count)
    names = ["wino", "softmax", "dot2"]
    loads = [f"memory:{n}" for n in names]
    procs = [harness(world, tmp_path, loads, env={"KPATCH_PYTHON": py}, args=("--threads", "8"), popen=True)
             for _ in range(2)]
    runs = []
    for p, log in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        runs.append(parse(out, err, log))
    assert spawns(count) == len(names)
    for run in runs:
        assert len(run.loads) == 8 * len(names)
        for load in run.loads:
            name = os.path.basename(load.file)[: -len(".co")]
            assert load.status == 0 and load.received == world["expected"][name]
    misses = [e for run in runs for e in run.objects() if e["cache"] == "miss"]
    assert 3 <= len(misses)  # every load that waited for the lock counts as a miss; 3 patcher runs in all


KILLER = """
import os, signal, sys
real = os.fsync
def fsync(fd):
    path = os.readlink(f"/proc/self/fd/{fd}")
    if os.path.basename(path).startswith(".kpatch-") and "/objects/" in path:
        # the first entry file written is the patched object's temp file: cut it in half and die
        os.ftruncate(fd, os.fstat(fd).st_size // 2)
        os.kill(os.getpid(), signal.SIGKILL)
    return real(fd)
os.fsync = fsync
import runpy
runpy.run_module("kpatch.delivery.patcher", run_name="__main__", alter_sys=True)
"""


def test_a_patcher_killed_mid_write_leaves_no_entry_that_is_read(world, tmp_path):
    killer = tmp_path / "killer.py"
    killer.write_text(KILLER)
    py = tmp_path / "py-killer"
    # the hook runs: PY -m kpatch.delivery.patcher ARGS; the wrapper runs the killer script instead
    py.write_text(f"#!/bin/sh\nshift 2\nexec '{sys.executable}' '{killer}' \"$@\"\n")
    py.chmod(0o755)
    c = tmp_path / "cache"
    run = harness(world, tmp_path, ["memory:wino"], env={"KPATCH_PYTHON": str(py)})
    original = open(world["objs"]["wino"], "rb").read()
    assert run.loads[0].received == original
    (entry,) = run.objects()
    assert entry["action"] == "error" and "killed by signal 9" in entry["reason"]
    assert cache.read_record(str(c), entry["key"], "override") is None
    leftovers = [f for _, _, fs in os.walk(c / "objects") for f in fs]
    assert leftovers and not any(f.endswith(".rec") for f in leftovers)  # a temp file (or .co) without a record
    # the next load patches it properly
    count = str(tmp_path / "count")
    again = harness(world, tmp_path, ["memory:wino"], env={"KPATCH_PYTHON": counting_python(
        str(tmp_path / "py"), count)})
    assert spawns(count) == 1 and again.loads[0].received == world["expected"]["wino"]


def test_a_corrupted_entry_is_detected_and_redone(world, tmp_path):
    c = tmp_path / "cache"
    recs = {n: cache.patch_into_cache(open(world["objs"][n], "rb").read(), "override", str(c))
            for n in ("wino", "softmax", "neuron")}
    co = bytearray(open(recs["wino"].co_path, "rb").read())
    co[len(co) // 2] ^= 0xFF  # same size, other bytes
    open(recs["wino"].co_path, "wb").write(co)
    with open(recs["softmax"].co_path, "ab") as f:  # other size
        f.write(b"\0")
    open(recs["neuron"].path, "w").write("kpatch-cache 1 safe\n{}\n")  # a record line the hook cannot read
    assert all(cache.read_record(str(c), r.key, "override") is None for r in recs.values())
    count = str(tmp_path / "count")
    run = harness(world, tmp_path, ["memory:wino", "memory:softmax", "memory:neuron"],
                  env={"KPATCH_PYTHON": counting_python(str(tmp_path / "py"), count)})
    assert spawns(count) == 3
    for load, name in zip(run.loads, ("wino", "softmax", "neuron")):
        assert load.received == world["expected"][name]
    assert [e["cache"] for e in run.objects()] == ["miss"] * 3
    assert all(cache.read_record(str(c), r.key, "override") is not None for r in recs.values())


def _gone(pid: int) -> bool:
    """No such process, or a zombie (killed; its new parent has not reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_no_patcher_a_missing_one_and_a_timeout_pass_the_original(world, tmp_path):
    original = open(world["objs"]["wino"], "rb").read()
    unset = harness(world, tmp_path, ["memory:wino"])
    assert unset.loads[0].received == original
    assert unset.objects()[0]["action"] == "passthrough" and "KPATCH_PYTHON" in unset.objects()[0]["reason"]

    missing = harness(world, tmp_path, ["memory:wino"], env={"KPATCH_PYTHON": str(tmp_path / "no-such-python")})
    assert missing.loads[0].received == original
    assert missing.objects()[0]["action"] == "error" and "cannot start the patcher" in missing.objects()[0]["reason"]

    pids = tmp_path / "sleeper.pids"
    sleeper = tmp_path / "sleeper"
    sleeper.write_text(f"#!/bin/sh\necho $$ >> '{pids}'\nsleep 60 &\necho $! >> '{pids}'\nwait\n")
    sleeper.chmod(0o755)
    t0 = time.monotonic()
    slow = harness(world, tmp_path, ["memory:wino"], env={"KPATCH_PYTHON": str(sleeper), "KPATCH_TIMEOUT": "1"})
    took = time.monotonic() - t0
    assert slow.loads[0].received == original
    assert slow.objects()[0]["action"] == "error" and "KPATCH_TIMEOUT=1" in slow.objects()[0]["reason"]
    assert took < 10 and 1000 <= slow.objects()[0]["ms"] < 5000
    time.sleep(0.2)
    for pid in map(int, pids.read_text().split()):  # the patcher's whole process group was killed
        assert _gone(pid), pid
    assert not os.listdir(tmp_path / "cache" / "tmp")  # the hand-over files are gone


def test_harden_mode_takes_gfx1010_objects_and_passes_gfx1030_ones(world, tmp_path):
    run = harness(world, tmp_path, ["memory:wino"], env={"KPATCH_MODE": "harden"})
    assert run.objects()[0]["action"] == "other-target" and run.objects()[0]["target"] == "gfx1030"
    bad = harness(world, tmp_path, ["memory:wino"], env={"KPATCH_MODE": "native"})
    assert bad.onload["ok"] is False and "KPATCH_MODE" in bad.log[0]["reason"]


def test_a_lock_file_pruned_while_the_hook_waits_is_not_trusted(world, tmp_path):
    """`kpatch cache prune` unlinks a lock file while holding it. A hook that
    was waiting on the old file must not patch while a third process holds the
    file now at the path: it re-opens the path and waits for that holder."""
    import fcntl

    count = str(tmp_path / "count")
    py = counting_python(str(tmp_path / "py"), count)
    cache_dir = tmp_path / "cache"
    locks = cache_dir / "locks"
    locks.mkdir(parents=True)
    key = object_key(open(world["objs"]["softmax"], "rb").read())
    path = str(locks / f"{key}.override.lock")
    old = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(old, fcntl.LOCK_EX)
    p, log = harness(world, tmp_path, ["memory:softmax"], env={"KPATCH_PYTHON": py}, cache_dir=cache_dir,
                     popen=True)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(log) and time.monotonic() < deadline:  # the hook is loaded and waiting
            time.sleep(0.05)
        time.sleep(0.5)
        os.unlink(path)                                   # what prune does, holding the old lock
        new = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # a third process locks the new file
        fcntl.flock(new, fcntl.LOCK_EX)
        os.close(old)                                     # prune lets go of the old one
        time.sleep(3)
        assert spawns(count) == 0 and p.poll() is None     # still waiting for the third process
        os.close(new)
        out, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    run = parse(out, err, log)
    assert spawns(count) == 1 and run.loads[0].received == world["expected"]["softmax"]


def test_prune_removes_the_lock_files_no_process_holds(tmp_path):
    import fcntl

    locks = tmp_path / "locks"
    locks.mkdir()
    free, held = locks / ("a" * 32 + ".override.lock"), locks / ("b" * 32 + ".override.lock")
    free.write_bytes(b"")
    held.write_bytes(b"")
    fd = os.open(held, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        cache.prune(str(tmp_path))
        assert not free.exists() and held.exists()
    finally:
        os.close(fd)
    cache.prune(str(tmp_path))
    assert not held.exists()
