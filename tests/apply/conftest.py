"""Helpers for the `kpatch apply` tests: test doubles for the rules engine,
builders of MIOpen-shaped DBs from the fixtures, and LLVM oracles.

The fake patch functions stand in for ``kpatch.rewrite.patcher.patch_code_object``
(same signature, duck-typed result).  They make a small, valid edit that
everything can see: the last ELF identification padding byte (EI_PAD,
offset 15, ignored by loaders) becomes ``MARK``; ``fake_native`` also sets
e_flags to gfx1010 with xnack off, as native mode must.  ``fake_is_patched``
recognises that mark, standing in for the provenance record.
"""

from __future__ import annotations

import bz2
import hashlib
import os
import sqlite3
import struct
import subprocess
import sys

import pytest

from conftest import FIXTURES
from kpatch.codeobject import CodeObject
from kpatch.containers.kdb import write_kdb
from kpatch.rewrite.outcome import KernelOutcome, PatchResult

READELF = "llvm-readelf-16"
OBJDUMP = "llvm-objdump-16"
BUNDLER15 = "/usr/lib/llvm-15/bin/clang-offload-bundler"
BUNDLER19 = "/usr/lib/llvm-19/bin/clang-offload-bundler"
MARK_OFFSET = 15
MARK = 0x4B
E_FLAGS_OFFSET = 48
GFX1010_XNACK_OFF_V4 = 0x233  # mach 0x33 | xnack field "off" (AMDGPUUsage)


def fixture(name: str) -> str:
    path = os.path.join(FIXTURES, name)
    if not os.path.exists(path):
        pytest.skip(f"fixture {name} not built (tools/build_fixtures.sh)")
    return path


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def sha(path: str) -> str:
    return hashlib.sha256(read(path)).hexdigest()


def listing(directory: str) -> list[str]:
    return sorted(os.listdir(directory))


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=True)


# --- test doubles for the rules engine -------------------------------------------------


#: the patch functions' own result types (kpatch.rewrite.outcome), under the doubles' names
FakeKernel = KernelOutcome


def FakeResult(data: bytes | None, kernels: list, changed: bool) -> PatchResult:
    return PatchResult(data if changed else None, kernels)


def kernel_names(data: bytes) -> list[str]:
    return [k.name for k in CodeObject.from_bytes(data).kernels]


def marked(data: bytes) -> bytes:
    out = bytearray(data)
    out[MARK_OFFSET] = MARK
    return bytes(out)


class FakePatcher:
    """Test double: marks every object it is given (and relabels gfx1010 in
    native mode); kernels named in ``refuse`` are refused, and objects whose
    kernels are all in ``skip`` are returned unchanged.  Records its calls."""

    def __init__(self, refuse: tuple[str, ...] = (), skip: tuple[str, ...] = ()):
        self.refuse = set(refuse)
        self.skip = set(skip)
        self.calls: list[tuple[str, list[str]]] = []

    def __call__(self, data: bytes, *, mode: str, rule_sets: list[str]) -> FakeResult:
        self.calls.append((mode, list(rule_sets)))
        names = kernel_names(data)
        if names and set(names) <= self.skip:
            return FakeResult(None, [FakeKernel(n, "untouched", "nothing to do") for n in names], False)
        out = bytearray(marked(data))
        if mode == "native":
            struct.pack_into("<I", out, E_FLAGS_OFFSET, GFX1010_XNACK_OFF_V4)
        kernels = [FakeKernel(n, "refused", "fake refusal") if n in self.refuse
                   else FakeKernel(n, "patched", "", ["FAKE001"]) for n in names]
        return FakeResult(bytes(out), kernels, True)


def fake_is_patched(data: bytes) -> bool:
    """Test double for the provenance check."""
    return len(data) > MARK_OFFSET and data[MARK_OFFSET] == MARK


def no_provenance(data: bytes) -> None:
    return None


# --- MIOpen-shaped DBs -------------------------------------------------------------------

GFX1010_ITEMS = [
    ("miopen_like.cl.o", " -DMLO_FILTER_SIZE0=3 -mcpu=gfx1010", "miopen_like.cl.gfx1010.v4.hsaco"),
    ("miopen_like.cl.o", " -DMLO_FILTER_SIZE0=3 -mcode-object-version=5 -mcpu=gfx1010",
     "miopen_like.cl.gfx1010.v5.hsaco"),
    ("asm_kernels.s.o", "-Wa,-defsym,ROCM_METADATA_VERSION=5 -mcumode -mwavefrontsize64 -mcpu=gfx1010",
     "asm_kernels.s.gfx1010.v5.hsaco"),
    ("mathops.cpp.o", " -std=c++17 -O3 -mcpu=gfx1010", "mathops.hip.gfx1010.v4.hsaco"),
    ("vecops.cpp.o", " -std=c++17 -O3 -mcpu=gfx1010", "vecops.hip.bundle"),
]


def build_gfx1010_kdb(path: str) -> list[tuple[str, str, bytes]]:
    """A system kDB of gfx1010 code (keys ending -mcpu=gfx1010), plus one
    gfx906-keyed entry; returns the items."""
    items = [(n, a, read(fixture(f))) for n, a, f in GFX1010_ITEMS]
    items.append(("other.cl.o", " -mcpu=gfx906", read(fixture("miopen_like.cl.gfx1030.v4.hsaco"))))
    write_kdb(path, items, user=False)
    return items


# --- MIOpen's lookup, as MIOpen runs it ------------------------------------------------------


def miopen_select(db_path: str, name: str, args: str) -> bytes | None:
    """MIOpen's KernDb::FindRecordUnsafe: the values pasted into the SQL text,
    first row taken, bzip2-decompressed into exactly ``uncompressed_size``
    bytes (raw when 0), MD5 checked; returns the code object."""
    sql = ("SELECT kernel_blob, kernel_hash, uncompressed_size FROM kern_db "
           f"WHERE (kernel_name = '{name}') AND (kernel_args = '{args}');")
    # immutable: no -wal/-shm files are made, and rows left in a WAL would be missed
    # (kpatch promises a DB file that holds everything)
    conn = sqlite3.connect(f"file:{db_path}?mode=ro&immutable=1", uri=True)
    try:
        row = conn.execute(sql).fetchone()
    finally:
        conn.close()
    if row is None:
        return None
    blob, md5, size = row
    code = bz2.decompress(blob) if size else bytes(blob)
    assert len(code) == (size or len(blob)), "uncompressed_size is not the code object's length"
    assert hashlib.md5(code).hexdigest() == md5, "kernel_hash is not the MD5 of the code object"
    return code


def readelf_flags(path: str) -> int:
    out = run(READELF, "-h", path).stdout
    for line in out.splitlines():
        if line.strip().startswith("Flags:"):
            return int(line.split()[1], 16)
    raise AssertionError("no Flags line")


def readelf_target(path: str) -> str | None:
    p = subprocess.run([READELF, "--notes", path], capture_output=True, text=True, check=True)
    assert "warning" not in p.stderr.lower(), p.stderr
    for line in p.stdout.splitlines():
        if line.strip().startswith("amdhsa.target:"):
            return line.split(":", 1)[1].strip()
    return None


def invoke(monkeypatch, args: list[str], *, env: dict | None = None, patcher=None, is_patched=None):
    """Run `kpatch ARGS` in-process (click's CliRunner) with the rules engine
    and provenance check replaced by test doubles; returns (exit code,
    stdout, stderr, exception)."""
    from click.testing import CliRunner

    import kpatch.cli.apply as apply_cli
    from kpatch.cli.main import cli

    if patcher is not None:
        monkeypatch.setattr(apply_cli, "default_patch_fn", lambda mode: patcher)
    if is_patched is not None:
        monkeypatch.setattr(apply_cli, "default_provenance_fn", lambda: is_patched)
    for k in ("HSA_OVERRIDE_GFX_VERSION", "MIOPEN_DEVICE_CU", "MIOPEN_CUSTOM_CACHE_DIR"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("KPATCH_NO_PROGRESS", "1")
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    try:
        runner = CliRunner(mix_stderr=False)  # click < 8.2
    except TypeError:
        runner = CliRunner()  # click >= 8.2 keeps stderr apart
    r = runner.invoke(cli, args, catch_exceptions=True)
    exc = r.exception if not isinstance(r.exception, SystemExit) else None
    return r.exit_code, r.stdout, r.stderr, exc


def python_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`kpatch ARGS` through the CLI's own main() (its real exit statuses and
    error lines), in this process, with the DB-choosing variables unset."""
    from conftest import kpatch_in_process

    unset = {"HSA_OVERRIDE_GFX_VERSION": None, "MIOPEN_DEVICE_CU": None, "MIOPEN_CUSTOM_CACHE_DIR": None}
    return kpatch_in_process(*args, env={**unset, **(env or {})})


def db_rows(path) -> dict:
    """{(kernel_name, kernel_args): (blob, hash, size)} of a kernel DB as
    stored, read with sqlite3 alone (through the WAL, as MIOpen reads)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.text_factory = bytes
    try:
        return {(n, a): (b, h, z) for n, a, b, h, z in conn.execute(
            "SELECT kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size FROM kern_db")}
    finally:
        conn.close()


def integrity(path) -> list:
    """SQLite's ``PRAGMA integrity_check`` rows for the DB at ``path``."""
    conn = sqlite3.connect(str(path))
    try:
        return conn.execute("PRAGMA integrity_check;").fetchall()
    finally:
        conn.close()
