"""Files kpatch writes get the mode any new file gets (0666 minus the
umask: 0644 under umask 022), not mkstemp's 0600: `extract -o`, `apply FILE
-o` (code object and host library) and the HTML reports."""

from __future__ import annotations

import os
import stat

import pytest

from kpatch.data import sample_db_path

from .conftest import FakePatcher, fake_is_patched, fixture, invoke


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_extract_output_is_0644(tmp_path, monkeypatch, umask_022):
    out = tmp_path / "one.hsaco"
    src = fixture("miopen_like.cl.gfx1030.v4.hsaco")
    code, _, stderr, exc = invoke(monkeypatch, ["extract", src, "-o", str(out)])
    assert exc is None and code == 0, stderr
    assert mode(out) == 0o644


def test_apply_file_outputs_are_0644(tmp_path, monkeypatch, umask_022):
    out = tmp_path / "out.hsaco"
    report = tmp_path / "report.html"
    code, _, stderr, exc = invoke(monkeypatch, ["apply", fixture("miopen_like.cl.gfx1030.v4.hsaco"), "-o", str(out),
                                                "--mode", "override", "--report", str(report)],
                                  patcher=FakePatcher(), is_patched=fake_is_patched)
    assert exc is None and code == 0, stderr
    assert mode(out) == 0o644 and mode(report) == 0o644


def test_apply_host_library_output_gets_a_new_files_mode(tmp_path, monkeypatch, umask_022):
    # a read-only source (0444) still gives a writable 0644 copy
    src = tmp_path / "vecops.host.o"
    src.write_bytes(open(fixture("vecops.hip.host.o"), "rb").read())
    os.chmod(src, 0o444)
    out = tmp_path / "out.o"
    code, _, stderr, exc = invoke(monkeypatch, ["apply", str(src), "-o", str(out), "--mode", "override"],
                                  patcher=FakePatcher(), is_patched=fake_is_patched)
    assert exc is None and code == 0, stderr
    assert mode(out) == 0o644


def test_mode_follows_the_umask(tmp_path, monkeypatch):
    old = os.umask(0o027)
    try:
        out = tmp_path / "one.hsaco"
        code, *_ = invoke(monkeypatch, ["extract", f"kdb://{sample_db_path()}?name=mathops.cpp.o"
                                        "&args=%20-std%3Dc%2B%2B17%20-O3%20-DUSE_DOT2%3D1%20-mcpu%3Dgfx1030",
                                        "-o", str(out)])
        assert code == 0 and mode(out) == 0o640
    finally:
        os.umask(old)
