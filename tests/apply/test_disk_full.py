"""A full disk while `kpatch apply` writes: one line `error: ITEM: no space
left on device ...`, exit status 1, the user DB byte for byte as it was, and
nothing of kpatch's left in the output directory.

The disk really fills: each case mounts a tmpfs of a few KiB (kpatch runs as
root here; without the right to mount, the tests are skipped) and sweeps its
size, so that the space runs out at every stage in turn (staging DB, backup,
building the new DB, replacing it) until the size where apply succeeds."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES
from kpatch.containers.kdb import KernelDB, write_kdb
from kpatch.data import expand
from kpatch.errors import disk_full_reason

DB_NAME = "gfx1030_18.ukdb"
#: SQLite's own side files of a WAL DB: SQLite creates them when it opens the DB and removes them
#: when the last connection closes cleanly; they are not kpatch's, and kpatch never deletes them
#: (another process, MIOpen, may be using them).
SQLITE_SIDE_FILES = (DB_NAME + "-wal", DB_NAME + "-shm")


@pytest.fixture
def tiny_fs(tmp_path):
    """``mount(size_kib) -> path``: a fresh tmpfs of that size (unmounted after the test)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    mounted = []

    def umount() -> None:
        p = subprocess.run(["umount", str(mnt)], capture_output=True, text=True)
        if p.returncode != 0:
            held = [f"{pid}: {os.readlink(f'/proc/{pid}/fd/{fd}')}" for pid in os.listdir("/proc") if pid.isdigit()
                    for fd in (os.listdir(f"/proc/{pid}/fd") if os.access(f"/proc/{pid}/fd", os.R_OK) else [])
                    if os.path.exists(f"/proc/{pid}/fd/{fd}") and
                    os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(mnt))]
            raise AssertionError(f"cannot unmount {mnt}: {p.stderr.strip()}; open: {held}")
        mounted.clear()

    def mount(size_kib: int) -> str:
        if mounted:
            umount()
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0755", "tmpfs", str(mnt)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs to fill (needs root with CAP_SYS_ADMIN): {p.stderr.strip()}")
        mounted.append(True)
        return str(mnt)

    yield mount
    if mounted:
        umount()


def run_kpatch(args: list[str]) -> tuple[int, str]:
    """`kpatch ARGS` as a user runs it: (exit status, stderr).  A process of
    its own, so that nothing it left open keeps the file system busy."""
    env = {k: v for k, v in os.environ.items() if k not in ("KPATCH_DEBUG", "HSA_OVERRIDE_GFX_VERSION")}
    env["KPATCH_NO_PROGRESS"] = "1"
    p = subprocess.run([sys.executable, "-m", "kpatch", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, env=env, timeout=300)
    return p.returncode, p.stderr


def snapshot(directory: str) -> dict[str, str]:
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def sample_rows() -> list[tuple[str, str, bytes]]:
    with KernelDB.open(expand("@sample")) as db:
        return [(e.kernel_name, e.kernel_args, e.code()) for e in db.entries()]


def sweep(tiny_fs, existing: str | None, start_kib: int, step_kib: int = 12,
          stop_kib: int = 512) -> tuple[list[int], list[str]]:
    """Apply @sample into a tmpfs of growing size; returns (sizes that ran
    out of space, what went wrong).  Stops at the first size where apply
    succeeds (there must be one)."""
    full, problems = [], []
    for kib in range(start_kib, stop_kib, step_kib):
        out = tiny_fs(kib)
        db = os.path.join(out, DB_NAME)
        if existing is not None:
            with open(existing, "rb") as src, open(db, "wb") as dst:
                dst.write(src.read())
        before = snapshot(out)
        code, err = run_kpatch(["apply", "--db", "@sample", "--mode", "override", "--cu", "18",
                                                   "--out-dir", out])
        after = snapshot(out)
        if code == 0:
            assert err == ""
            assert after.get(DB_NAME) != before.get(DB_NAME)  # it did write, once there was room
            return full, problems
        full.append(kib)
        if code != 1 or err.count("\n") != 1 or not err.startswith(f"error: {db}: ") \
                or "no space left on device" not in err:
            problems.append(f"{kib} KiB: exit {code}, stderr {err!r}")
        if after.get(DB_NAME) != before.get(DB_NAME):
            problems.append(f"{kib} KiB: the user DB changed")
        for name in sorted(set(after) - set(before) - set(SQLITE_SIDE_FILES)):
            problems.append(f"{kib} KiB: left {name}")
    pytest.fail(f"apply never succeeded below {stop_kib} KiB")


def check(problems: list[str]) -> None:
    assert problems == []  # nothing kpatch made is left, the staging DB included


def test_full_disk_with_an_existing_user_db(tiny_fs, tmp_path):
    existing = str(tmp_path / "existing.ukdb")
    write_kdb(existing, [("old_" + n, a, c) for n, a, c in sample_rows()], user=True)
    size_kib = (os.path.getsize(existing) + 4095) // 4096 * 4
    full, problems = sweep(tiny_fs, existing, size_kib + 4)
    assert len(full) >= 5  # the space ran out at several stages
    check(problems)


def test_full_disk_without_a_user_db(tiny_fs):
    full, problems = sweep(tiny_fs, None, 4)
    assert len(full) >= 5
    check(problems)


def test_full_disk_apply_file(tiny_fs):
    out = tiny_fs(4)
    target = os.path.join(out, "patched.hsaco")
    src = os.path.join(FIXTURES, "asm_kernels.s.gfx1030.v4.hsaco")
    if not os.path.exists(src):
        pytest.skip("fixture not built (tools/build_fixtures.sh)")
    fd = os.open(os.path.join(out, "filler"), os.O_WRONLY | os.O_CREAT)  # fill the rest of the file system
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)
    before = snapshot(out)
    code, err = run_kpatch(["apply", src, "-o", target, "--mode", "override"])
    assert (code, err) == (1, f"error: {target}: no space left on device; it was not written\n")
    assert snapshot(out) == before


def test_full_disk_report(tiny_fs, tmp_path):
    out = tiny_fs(4)
    report = os.path.join(out, "report.html")
    code, err = run_kpatch(["apply", "--db", "@sample", "--mode", "override", "--cu", "18",
                                               "--out-dir", str(tmp_path / "db"), "--report", report])
    assert (code, err) == (1, f"error: {report}: no space left on device; the HTML report was not written\n")
    assert os.listdir(out) == []


def test_stdout_on_a_full_device():
    """/dev/full: every write fails with ENOSPC."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    env = dict(os.environ, KPATCH_NO_PROGRESS="1")
    env.pop("KPATCH_DEBUG", None)
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "kpatch", "scan", "@sample"], stdout=full, stderr=subprocess.PIPE,
                           text=True, env=env, timeout=300)
    assert (p.returncode, p.stderr) == (1, "error: no space left on device\n")


def test_disk_full_reason():
    import sqlite3

    assert disk_full_reason(OSError(errno.ENOSPC, "x")) == "no space left on device"
    assert disk_full_reason(OSError(errno.EDQUOT, "x")) == "disk quota exceeded"
    assert disk_full_reason(OSError(errno.EIO, "x")) is None
    assert disk_full_reason(sqlite3.OperationalError("database or disk is full")) == "no space left on device"
    assert disk_full_reason(sqlite3.OperationalError("database is locked")) is None
    assert disk_full_reason(ValueError("database or disk is full")) is None
