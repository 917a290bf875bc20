"""`kpatch doctor` on fake sysfs trees (an RX 5600 XT, an RX 5700 XT, an RX
6800, no GPU) and fake PyTorch installs.  Expected names come from libdrm's
amdgpu.ids (device id + revision), CU counts from AMD's specifications, the
user DB name from MIOpen's rule (gfx1030_<CUs/2>), library resolution from
the system's own dynamic loader (ldd)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from kpatch.delivery import cache, hooklib
from kpatch.fieldkit import doctor
from tests.conftest import FIXTURES, run_kpatch

from .fake import PYTHON, RX5600XT, RX5700XT, RX6800, env_for, make_sysfs, make_system_hip, make_torch

AMDGPU_IDS = "/usr/share/libdrm/amdgpu.ids"


def diagnose(root, env, **kw):
    kw.setdefault("python", PYTHON)
    kw.setdefault("cache_dir", os.path.join(root, "kcache"))
    return doctor.diagnose(doctor.Options(root=str(root), env=env, **kw))


def by_topic(d, topic):
    return [c for c in d.checks if c.topic == topic]


@pytest.fixture(scope="module")
def fake_torch(tmp_path_factory):
    if not shutil.which("gcc"):
        pytest.skip("gcc is not installed")
    return make_torch(str(tmp_path_factory.mktemp("torch")))


@pytest.mark.parametrize("with_ids", [True, False])
def test_rx5600xt(tmp_path, fake_torch, with_ids):
    root = make_sysfs(str(tmp_path), [RX5600XT])
    if with_ids:
        if not os.path.exists(AMDGPU_IDS):
            pytest.skip("libdrm's amdgpu.ids is not installed")
        os.makedirs(tmp_path / "usr/share/libdrm")
        shutil.copy(AMDGPU_IDS, tmp_path / "usr/share/libdrm/amdgpu.ids")
    d = diagnose(root, env_for(fake_torch))
    gpu = by_topic(d, "GPU")
    assert len(gpu) == 1 and gpu[0].status == "ok"
    assert "AMD Radeon RX 5600 XT (gfx1010, 36 CUs, PCI 1002:731f rev ca)" in gpu[0].text
    assert d.facts["gpus"][0]["miopen_cu"] == 18
    assert d.facts["miopen"]["user_db"] == "gfx1030_18.ukdb"
    assert by_topic(d, "driver")[0].status == "ok" and "6.1.0-18-amd64" in by_topic(d, "driver")[0].text
    assert by_topic(d, "override")[0].status == "ok"
    torch = by_topic(d, "PyTorch")[0]
    assert torch.status == "ok" and "torch 2.3.1+rocm6.0, HIP 6.0.32830" in torch.text
    assert any(c.topic == "known limits" and "amdgpu kernel driver" in c.text for c in d.checks)
    assert by_topic(d, "next")[0].next == "kpatch run -- python train.py"
    assert d.problems == 0


def test_rx5700xt_and_the_override_set_in_the_shell(tmp_path, fake_torch):
    root = make_sysfs(str(tmp_path), [RX5700XT])
    d = diagnose(root, env_for(fake_torch, HSA_OVERRIDE_GFX_VERSION="10.3.0"))
    assert "AMD Radeon RX 5700 XT (gfx1010, 40 CUs" in by_topic(d, "GPU")[0].text
    assert d.facts["miopen"]["user_db"] == "gfx1030_20.ukdb"
    ov = by_topic(d, "override")[0]
    assert ov.status == "warning" and "unpatched gfx1030 code" in ov.text and "kpatch run" in ov.next


def test_rx6800_needs_no_kpatch(tmp_path, fake_torch):
    root = make_sysfs(str(tmp_path), [RX6800])
    d = diagnose(root, env_for(fake_torch))
    gpu = by_topic(d, "GPU")[0]
    assert gpu.status == "ok" and "AMD Radeon RX 6800 (gfx1030, 60 CUs" in gpu.text and "not needed" in gpu.text
    assert not by_topic(d, "known limits") and not by_topic(d, "next")
    assert d.facts["miopen"]["user_db"] is None


def test_no_gpu_no_driver_no_torch(tmp_path):
    root = make_sysfs(str(tmp_path), [], amdgpu=False)
    d = diagnose(root, env_for(None))
    assert by_topic(d, "GPU")[0].status == "problem" and "no AMD GPU" in by_topic(d, "GPU")[0].text
    assert by_topic(d, "driver")[0].status == "problem" and by_topic(d, "driver")[0].next == "sudo modprobe amdgpu"
    t = by_topic(d, "PyTorch")[0]
    assert t.status == "problem" and "No module named 'torch'" in t.text and "--python" in t.next


def test_missing_dev_kfd_is_a_problem(tmp_path, fake_torch):
    root = make_sysfs(str(tmp_path), [RX5600XT], kfd=False)
    d = diagnose(root, env_for(fake_torch))
    assert by_topic(d, "/dev/kfd")[0].status == "problem"


def test_cpu_only_torch_is_a_problem(tmp_path):
    t = make_torch(str(tmp_path / "cpu"), version="2.3.1+cpu", hip=None, libs=False)
    d = diagnose(make_sysfs(str(tmp_path), [RX5600XT]), env_for(t))
    p = by_topic(d, "PyTorch")[0]
    assert p.status == "problem" and "CPU-only build" in p.text and "whl/rocm" in p.next


def _ldd(lib: str, env: dict) -> dict[str, str]:
    out = subprocess.run(["ldd", lib], capture_output=True, text=True, env=env, check=True).stdout
    got = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=>":
            got[parts[0]] = os.path.realpath(parts[2])
    return got


@pytest.mark.parametrize("use_ld_library_path", [False, True])
def test_runtime_libraries_are_the_ones_the_loader_opens(tmp_path, fake_torch, use_ld_library_path):
    """The loader (ldd) is the oracle: bundled libraries through $ORIGIN, or
    LD_LIBRARY_PATH's first (it comes before DT_RUNPATH)."""
    if not shutil.which("ldd"):
        pytest.skip("ldd is not installed")
    sysdir = make_system_hip(str(tmp_path))
    extra = {"LD_LIBRARY_PATH": sysdir} if use_ld_library_path else {}
    env = env_for(fake_torch, **extra)
    truth = _ldd(os.path.join(fake_torch.lib, "libtorch_hip.so"), env)
    runtime = doctor.runtime_libraries(fake_torch.dir, env, "/")
    for stem in ("libamdhip64", "libMIOpen", "librocblas", "libhsa-runtime64"):
        assert os.path.realpath(runtime[stem]["path"]) == truth[runtime[stem]["name"]], stem
    assert (truth["libamdhip64.so.6"].startswith(sysdir)) == use_ld_library_path
    d = diagnose(make_sysfs(str(tmp_path / "root"), [RX5600XT]), env)
    hip = by_topic(d, "HIP runtime")[0]
    if use_ld_library_path:
        assert hip.status == "warning" and "LD_LIBRARY_PATH" in hip.text and hip.next.startswith("unset")
    else:
        assert hip.status == "ok" and "bundled with PyTorch" in hip.text


def _target(path: str) -> str:
    """gfx1030 when e_flags' EF_AMDGPU_MACH (bits 0-7) is 0x36 (LLVM's AMDGPUUsage), per llvm-readelf-16."""
    out = subprocess.run(["llvm-readelf-16", "-h", path], capture_output=True, text=True, check=True).stdout
    flags = int(next(ln.split()[1] for ln in out.splitlines() if ln.strip().startswith("Flags:")), 16)
    return "gfx1030" if flags & 0xFF == 0x36 else "other"


def test_coverage_counts_cache_states(tmp_path, fake_torch):
    """Three code objects in the rocBLAS library directory, two of them
    gfx1030 (llvm-readelf-16 says so); one refused in the cache, the other
    not yet seen; after `kpatch warm` none is unseen."""
    if not shutil.which("llvm-readelf-16"):
        pytest.skip("llvm-readelf-16 is not installed")
    t = make_torch(str(tmp_path / "t"))
    rdir = os.path.join(t.lib, "rocblas", "library")
    os.makedirs(rdir)
    names = ["vecops.hip.gfx1030.v5.hsaco", "mathops.hip.gfx1030.v5.hsaco", "vecops.hip.gfx1010.v5.hsaco"]
    for n in names:
        shutil.copy(os.path.join(FIXTURES, n), os.path.join(rdir, n.replace(".hip.", "_") .replace(".v5", "")))
    with open(os.path.join(rdir, "TensileLibrary_lazy_gfx1030.dat"), "wb") as f:
        f.write(b"\x00not code")
    gfx1030 = [n for n in names if _target(os.path.join(FIXTURES, n)) == "gfx1030"]
    assert len(gfx1030) == 2
    kc = str(tmp_path / "kcache")
    with open(os.path.join(FIXTURES, gfx1030[0]), "rb") as f:
        key = hooklib.object_key(f.read())
    cache.store(kc, cache.Record(key=key, mode="override", status="refused", reason="test"))
    root = make_sysfs(str(tmp_path / "root"), [RX5600XT])
    d = diagnose(root, env_for(t), cache_dir=kc)
    cov = d.facts["coverage"]["rocBLAS library"]
    assert cov["objects"] == 2 and cov["counts"]["refused"] == 1 and cov["counts"]["not yet seen"] == 1
    line = by_topic(d, "coverage: rocBLAS library")[0]
    assert line.status == "warning" and line.next.startswith("kpatch warm ") and rdir in line.next
    p = run_kpatch("warm", "--cache", kc, rdir)
    assert p.returncode == 0, p.stderr
    d = diagnose(root, env_for(t), cache_dir=kc)
    counts = d.facts["coverage"]["rocBLAS library"]["counts"]
    assert counts["not yet seen"] == 0 and counts["refused"] == 1 and sum(counts.values()) == 2


def test_cli_text_json_and_exit_status(tmp_path, fake_torch):
    root = make_sysfs(str(tmp_path), [RX5600XT])
    env = env_for(fake_torch, KPATCH_CACHE_DIR=str(tmp_path / "kc"))
    p = run_kpatch("doctor", "--root", root, "--python", PYTHON, "--no-coverage", env=env)
    assert p.returncode == 0, p.stderr
    assert "ok       GPU" in p.stdout and "AMD Radeon RX 5600 XT" in p.stdout and "next: kpatch run" in p.stdout
    p = run_kpatch("doctor", "--json", "--root", root, "--python", PYTHON, "--no-coverage", env=env)
    doc = json.loads(p.stdout)
    assert doc["facts"]["gpus"][0]["name"] == "AMD Radeon RX 5600 XT"
    assert {c["status"] for c in doc["checks"]} <= {"ok", "warning", "problem"}
    none = make_sysfs(str(tmp_path / "none"), [])
    p = run_kpatch("doctor", "--root", none, "--python", PYTHON, "--no-coverage", env=env)
    assert p.returncode == 1 and "problem  GPU" in p.stdout and "Traceback" not in p.stderr
