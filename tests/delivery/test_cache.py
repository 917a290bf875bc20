"""The content key, the cache records and the patcher entry point."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from kpatch.delivery import cache
from kpatch.delivery.hooklib import hook_library_path, object_key

M = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                      0x27D4EB2F165667C5)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def _round(acc, v):
    return (_rotl((acc + v * P2) & M, 31) * P1) & M


def _merge(h, v):
    return (((h ^ _round(0, v)) * P1) + P4) & M


def _aval(h):
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    return h ^ (h >> 32)


def reference_key(data: bytes) -> str:
    """kpatch-key-1 written from its description in kpatch_hook.c, independently of the C code."""
    n = len(data)
    seed = ((n * P5) & M) ^ int.from_bytes(b"kpatch-1", "big")
    v = [(seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M]
    padded = data + bytes(-n % 32)
    for off in range(0, len(padded), 32):
        for i in range(4):
            v[i] = _round(v[i], int.from_bytes(padded[off + 8 * i: off + 8 * i + 8], "little"))
    h1 = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M
    for x in v:
        h1 = _merge(h1, x)
    h1 = _aval(h1 ^ n)
    h2 = (_rotl(v[0], 41) ^ _rotl(v[1], 29) ^ _rotl(v[2], 53) ^ _rotl(v[3], 3)) + P5 & M
    for x in reversed(v):
        h2 = _merge(h2, x)
    h2 = _aval(h2 ^ ((n * P3) & M))
    return f"{h1:016x}{h2:016x}"


@pytest.mark.parametrize("size", [0, 1, 7, 31, 32, 33, 64, 100, 4096 + 5])
def test_the_c_key_is_kpatch_key_1(size):
    data = bytes((i * 131 + 7) & 0xFF for i in range(size))
    assert object_key(data) == reference_key(data)
    assert object_key(bytearray(data)) == object_key(memoryview(data)) == object_key(data)


def test_the_key_tells_zero_padding_and_single_bits_apart():
    keys = {object_key(b"a" + bytes(k)) for k in range(40)} | {object_key(b"")}
    assert len(keys) == 41
    base = bytes(100)
    flipped = {object_key(base[:i] + b"\x01" + base[i + 1:]) for i in range(100)}
    assert len(flipped) == 100 and object_key(base) not in flipped
    assert re.fullmatch(r"[0-9a-f]{32}", object_key(base))


def test_hook_library_exports_the_tool_abi():
    out = subprocess.run(["nm", "-D", "--defined-only", hook_library_path()], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("nm is not available")
    names = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    assert {"OnLoad", "OnUnload", "kpatch_object_key"} <= names
    assert not any(n.startswith("Py") for n in names)


def test_records_round_trip_and_corruption_reads_as_missing(tmp_path, monkeypatch):
    rec = cache.store(str(tmp_path), cache.Record(key="ab" * 16, mode="override", status="patched", size=3,
                                                  target="gfx1030", kernels=[{"name": "k", "outcome": "patched",
                                                                              "reasons": [], "rules": ["r"]}]),
                      b"patched bytes")
    assert open(rec.path).read().split("\n")[0] == f"kpatch-cache 1 patched 13 {object_key(b'patched bytes')}"
    back = cache.read_record(str(tmp_path), "ab" * 16, "override")
    assert back is not None and back.to_json() == rec.to_json() and back.out_key == rec.out_key
    assert [r.key for r in cache.entries(str(tmp_path))] == ["ab" * 16]
    open(rec.co_path, "wb").write(b"patched bytez")
    assert cache.read_record(str(tmp_path), "ab" * 16, "override") is None
    assert list(cache.entries(str(tmp_path))) == []
    assert cache.prune(str(tmp_path)) == 1 and not os.path.exists(rec.path) and not os.path.exists(rec.co_path)

    monkeypatch.delenv("KPATCH_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == str(tmp_path / "xdg" / "kpatch")
    monkeypatch.setenv("KPATCH_CACHE_DIR", str(tmp_path / "k"))
    assert cache.cache_dir() == str(tmp_path / "k")


def _patcher(*args):
    return subprocess.run([sys.executable, "-m", "kpatch.delivery.patcher", *args], capture_output=True, text=True,
                          timeout=120)


def test_patcher_checks_the_key_and_records_errors(tmp_path):
    f = tmp_path / "in.bin"
    f.write_bytes(b"\x7fELF not really")
    r = _patcher("--cache", str(tmp_path / "c"), "--mode", "override", "--key", "0" * 32, str(f))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "nothing stored" in r.stderr
    assert not (tmp_path / "c" / "objects").exists()
    key = object_key(f.read_bytes())
    r = _patcher("--cache", str(tmp_path / "c"), "--mode", "override", "--key", key, str(f))
    assert r.returncode == 1 and r.stderr == f"error: {key}: not an AMDGPU code object\n"
    rec = cache.read_record(str(tmp_path / "c"), key, "override")
    assert rec.status == "error" and rec.reason == "not an AMDGPU code object"  # the next load does not retry


def _miopen_object(name: str) -> bytes:
    from kpatch.containers.kdb import KernelDB

    kdb = KernelDB.open(os.path.join(os.path.dirname(__file__), "..", "fixtures", "miopen", "gfx1030.kdb"))
    try:
        return next(e for e in kdb.entries() if e.kernel_name == name).code()
    finally:
        kdb.close()


@pytest.mark.parametrize("field_offset,word", [(0, "group"), (4, "private"), (8, "kernarg")])
def test_a_patch_that_changes_a_segment_size_is_not_used(tmp_path, monkeypatch, field_offset, word):
    """HIP sizes LDS, scratch and kernarg from its own copy of the unpatched
    metadata: a patched object whose kernel descriptor says otherwise (bytes
    0, 4, 8 of the descriptor, by the kernel descriptor's layout) is never
    stored; the original passes."""
    import struct

    from kpatch.codeobject import CodeObject

    data = _miopen_object("MIOpenSoftmax.cl.o")
    real = cache.patch_blob

    def grown(d, **kw):
        r = real(d, **kw)
        assert r.data is not None  # the object does need patching
        k = CodeObject.from_bytes(r.data).kernels[0]
        b = bytearray(r.data)
        at = k.descriptor_offset + field_offset
        struct.pack_into("<I", b, at, struct.unpack_from("<I", b, at)[0] + 16)
        r.data = bytes(b)
        return r

    monkeypatch.setattr(cache, "patch_blob", grown)
    rec = cache.patch_into_cache(data, "override", str(tmp_path))
    assert rec.status == "error" and "unpatched metadata" in rec.reason, rec.reason
    assert "(group, private, kernarg)" in rec.reason
    co_path = cache.entry_paths(str(tmp_path), rec.key, "override")[1]
    assert not os.path.exists(co_path)
    monkeypatch.setattr(cache, "patch_blob", real)  # the unchanged patch is used
    assert cache.patch_into_cache(data, "override", str(tmp_path / "b")).status == "patched"


def test_an_object_with_refused_kernels_is_stored_partial(tmp_path):
    """tests/rewrite/data/int_dot.s has one kernel kpatch expands and three it
    must refuse: the entry is `partial`, its object has the first patched and
    the others byte-identical (what the runtime would have run anyway)."""
    import shutil

    from kpatch.codeobject import CodeObject

    if shutil.which("clang-15") is None:
        pytest.skip("clang-15 not installed")
    src = os.path.join(os.path.dirname(__file__), "..", "rewrite", "data", "int_dot.s")
    obj = tmp_path / "idot.hsaco"
    subprocess.run(["clang-15", "-x", "assembler", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1030",
                    "-mcode-object-version=4", src, "-o", str(obj)], check=True)
    data = obj.read_bytes()
    rec = cache.patch_into_cache(data, "override", str(tmp_path / "c"))
    assert rec.status == "partial"
    status = {k["name"]: k["outcome"] for k in rec.to_json()["kernels"]}
    assert status == {"idot": "patched", "idot_clamp": "refused", "idot_sgpr": "refused", "idot_i4": "refused"}
    with open(cache.entry_paths(str(tmp_path / "c"), rec.key, "override")[1], "rb") as f:
        out = f.read()
    with open(cache.entry_paths(str(tmp_path / "c"), rec.key, "override")[0]) as f:
        assert f.readline().split()[2] == "partial"  # what the C hook reads

    def code(blob: bytes, name: str) -> bytes:
        co = CodeObject.from_bytes(blob)
        k = next(k for k in co.kernels if k.name == name)
        return blob[k.code_offset:k.code_offset + k.code_size]

    for name in ("idot_clamp", "idot_sgpr", "idot_i4"):
        assert code(out, name) == code(data, name)
    assert code(out, "idot") != code(data, "idot")
