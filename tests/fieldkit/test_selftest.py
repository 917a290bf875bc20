"""`kpatch selftest`'s harness, driven with `--device cpu` on a CPU-only
PyTorch (Debian's python3-torch): comparisons, a case that hangs (killed at
the timeout, with its process group), one that dies of SIGSEGV, one that
raises, a deliberately wrong result, real cases (a convolution's three
directions, an inline ResNet-18's training steps), the report (JSON, and the
HTML page read back from headless chromium's DOM), nothing personal in it;
and that with `--device cuda` and no GPU it stops before running anything."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from kpatch.fieldkit import selftest as st
from tests.conftest import run_kpatch

from .fake import RX5600XT, make_sysfs

CHROMIUM = "/usr/bin/chromium"
TORCH_PYTHONS = ("/usr/bin/python3", sys.executable)
MARK_USER = "kpmarkuser"


def _torch_python() -> str | None:
    for py in TORCH_PYTHONS:
        if os.path.exists(py) and subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
            return py
    return None


@pytest.fixture(scope="module")
def torch_python() -> str:
    py = _torch_python()
    if py is None:
        pytest.skip("no Python with torch (Debian: apt-get install python3-torch)")
    return py


def _cases() -> list[dict]:
    return st.list_cases(sys.executable, os.environ)  # `list` imports no torch: any Python will do


def test_the_case_list():
    cases = _cases()
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names))
    shown = st.select(cases, False, [])
    quick = st.select(cases, True, [])
    assert not any(c["name"].startswith("selfcheck-") for c in shown)
    assert set(c["name"] for c in quick) < set(c["name"] for c in shown)
    for shape in ("conv1x1", "conv3x3", "conv5x5", "conv7x7s2", "conv3x3dil2", "conv3x3g4", "conv3x3dw"):
        assert {f"{shape}-fp32", f"{shape}-fp16"} <= set(names)
    for n in ("batchnorm-train-fp32", "batchnorm-eval-fp32", "pooling-fp32", "activations-fp32", "softmax-fp32",
              "linear-1024-fp32", "linear-1024-fp16", "matmul-batched-fp32", "resnet18-train-fp32"):
        assert n in names
    assert {c["kind"] for c in quick} >= {"conv", "norm", "pool", "pointwise", "gemm", "train"}
    assert [c["name"] for c in st.select(cases, False, ["selfcheck-s*"])] == ["selfcheck-sleep", "selfcheck-segv"]
    with pytest.raises(Exception, match="no case matches nosuch"):
        st.select(cases, False, ["nosuch*"])


def _procs_running(word: str) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if word.encode() in f.read():
                        out.append(int(pid))
            except OSError:
                pass
    return out


def _selftest_report(torch_python, tmp_path_factory, timeout: str, *only: str):
    base = tmp_path_factory.mktemp("selftest")
    home = base / f"home-{MARK_USER}"
    home.mkdir()
    out = base / "report"
    p = run_kpatch("selftest", "--device", "cpu", "--python", torch_python, "--timeout", timeout, "--report", str(out),
                   *[a for case in only for a in ("--only", case)],
                   env={"HOME": str(home), "USER": MARK_USER, "LOGNAME": MARK_USER, "KPATCH_CACHE_DIR": ""},
                   cwd=str(base))
    with open(out / "report.json") as f:
        rep = json.load(f)
    return p, rep, out


@pytest.fixture(scope="module")
def cpu_report(torch_python, tmp_path_factory):
    """One selftest run on the CPU device: the harness cases (a short timeout,
    for the one that hangs) and a small real one."""
    return _selftest_report(torch_python, tmp_path_factory, "6", "selfcheck-*", "conv3x3-fp16")


@pytest.fixture(scope="module")
def real_report(torch_python, tmp_path_factory):
    """The real cases, with a timeout a loaded 2-core machine meets (resnet18's
    three training steps took over 6 s under a load of 7)."""
    return _selftest_report(torch_python, tmp_path_factory, "300", "conv3x3-fp32", "conv3x3-fp16",
                            "resnet18-train-fp32")


def _case(rep, name):
    return next(c for c in rep["cases"] if c["name"] == name)


def test_statuses(cpu_report):
    p, rep, _ = cpu_report
    assert p.returncode == 1, p.stderr  # not every case passed
    assert "Traceback" not in p.stderr
    assert rep["device"] == "cpu" and rep["harness_only"] and rep["hook"] == {"used": False}
    assert _case(rep, "selfcheck-pass")["status"] == "pass"
    wrong = _case(rep, "selfcheck-wrong")
    # the device side adds 1 to x*2 for x = 0..15: error = 1 / max|2x| = 1/30 (independent arithmetic)
    assert wrong["status"] == "wrong" and wrong["checks"][0]["error"] == pytest.approx(1 / 30)
    hung = _case(rep, "selfcheck-sleep")
    assert hung["status"] == "hung" and hung["checks"] == [
        {"check": "check", "status": "hung", "detail": "killed after the 6 s timeout while this check ran"}]
    assert 6 <= hung["seconds"] < 30
    segv = _case(rep, "selfcheck-segv")
    assert segv["status"] == "crashed" and segv["exit"] == "died of SIGSEGV"
    assert segv["checks"][0]["status"] == "crashed"
    err = _case(rep, "selfcheck-raise")
    assert err["status"] == "error" and "an exception inside the case" in err["checks"][0]["detail"]
    assert not _procs_running("selfcheck-sleep"), "the hung case's process was left running"


def test_real_cases_compare_and_time(real_report):
    _, rep, _ = real_report
    conv = _case(rep, "conv3x3-fp32")
    assert conv["status"] == "pass"
    assert [c["check"] for c in conv["checks"]] == ["forward", "backward-data", "backward-weights"]
    for c in conv["checks"]:
        assert c["error"] <= c["tolerance"] == 1e-3 and c["ms"] > 0 and c["ms_first"] > 0 and c["ms_cpu"] > 0
    fp16 = _case(rep, "conv3x3-fp16")
    assert fp16["status"] in ("pass", "skipped")  # Debian's torch 1.13 has no fp16 convolution on the CPU
    res = _case(rep, "resnet18-train-fp32")
    assert res["status"] == "pass" and res["checks"][0]["check"] == "train-3-steps"


def test_report_has_nothing_personal(cpu_report):
    _, rep, out = cpu_report
    for name in ("report.json", "report.html"):
        text = (out / name).read_text()
        assert MARK_USER not in text, name
    assert rep["doctor"]["checks"], "the doctor's output is in the report"


def test_html_report_in_chromium(cpu_report, tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed")
    from tests.diff.test_diff_html import chromium_dom
    _, rep, out = cpu_report
    dom = chromium_dom(CHROMIUM, str(out / "report.html"), tmp_path)
    rows = {n.attrs["data-case"]: n.attrs["data-status"] for n in dom.find_all("tr", cls="case")}
    assert rows == {c["name"]: c["status"] for c in rep["cases"]}
    counts = {n.attrs["data-count"]: int(n.text().strip()) for n in dom.find_all("td") if "data-count" in n.attrs}
    assert counts == rep["counts"] and sum(counts.values()) == len(rep["cases"])
    assert dom.find_all(id="harness-only")
    assert not dom.find_all("script") and not dom.find_all("link") and not dom.find_all("img")


def test_cuda_without_a_gpu_stops_before_running_anything(torch_python, tmp_path):
    empty = make_sysfs(str(tmp_path / "none"), [])
    p = run_kpatch("selftest", "--root", empty, "--python", torch_python, "--report", str(tmp_path / "r1"),
                   env={"KPATCH_CACHE_DIR": str(tmp_path / "kc")})
    assert p.returncode == 2 and "no AMD GPU in the KFD topology" in p.stderr and "on the CPU" in p.stderr
    assert not (tmp_path / "r1").exists() and "[1/" not in p.stderr


def test_cuda_when_torch_cannot_reach_the_gpu(torch_python, tmp_path):
    """A 5600 XT in KFD, but this torch has no ROCm (Debian's is CPU-only): it says so and stops."""
    root = make_sysfs(str(tmp_path / "r"), [RX5600XT])
    p = run_kpatch("selftest", "--root", root, "--python", torch_python, "--report", str(tmp_path / "r2"),
                   env={"KPATCH_CACHE_DIR": str(tmp_path / "kc")})
    assert p.returncode == 2, p.stderr
    assert "not a ROCm build" in p.stderr or "is_available() is False" in p.stderr
    assert "nothing was run" in p.stderr and not (tmp_path / "r2").exists()
