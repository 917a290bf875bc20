"""Fake system trees for the field kit's tests: a KFD topology, the amdgpu
module, /dev/kfd, and a fake PyTorch install whose GPU libraries are real
ELF shared libraries (built with gcc) that name their ROCm dependencies as
a ROCm wheel's do (DT_NEEDED, DT_RUNPATH=$ORIGIN)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

#: a 5600 XT, 5700 XT and RX 6800 as KFD and the PCI device describe them:
#: (gfx_target_version, simd_count, simd_per_cu, device_id, revision).  CU
#: counts: 36, 40 and 60 (AMD's specifications); device ids and revisions:
#: libdrm's amdgpu.ids (731F:CA RX 5600 XT, 731F:C1 RX 5700 XT, 73BF:C3 RX 6800).
RX5600XT = (100100, 72, 2, 0x731F, 0xCA)
RX5700XT = (100100, 80, 2, 0x731F, 0xC1)
RX6800 = (100300, 120, 2, 0x73BF, 0xC3)

CPU_NODE = "cpu_cores_count 8\nsimd_count 0\nmem_banks_count 1\ngfx_target_version 0\nvendor_id 0\ndevice_id 0\n"


def make_sysfs(root: str, gpus=(), *, amdgpu: bool = True, kfd: bool = True, kernel: str = "6.1.0-18-amd64") -> str:
    """A fake root with a KFD topology (node 0 a CPU, then one node per GPU)."""
    nodes = os.path.join(root, "sys", "class", "kfd", "kfd", "topology", "nodes")
    os.makedirs(os.path.join(nodes, "0"), exist_ok=True)
    with open(os.path.join(nodes, "0", "properties"), "w") as f:
        f.write(CPU_NODE)
    for i, (gfx, simds, per_cu, dev, rev) in enumerate(gpus, start=1):
        os.makedirs(os.path.join(nodes, str(i)), exist_ok=True)
        minor = 127 + i
        with open(os.path.join(nodes, str(i), "properties"), "w") as f:
            f.write(f"cpu_cores_count 0\nsimd_count {simds}\nmem_banks_count 1\nsimd_per_cu {per_cu}\n"
                    f"max_waves_per_simd 20\nlds_size_in_kb 64\nwave_front_size 32\narray_count 4\n"
                    f"gfx_target_version {gfx}\nvendor_id 4098\ndevice_id {dev}\nlocation_id 768\n"
                    f"drm_render_minor {minor}\nunique_id 0\n")
        d = os.path.join(root, "sys", "class", "drm", f"renderD{minor}", "device")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "revision"), "w") as f:
            f.write(f"0x{rev:02x}\n")
    if amdgpu:
        os.makedirs(os.path.join(root, "sys", "module", "amdgpu"), exist_ok=True)
    if kfd:
        os.makedirs(os.path.join(root, "dev"), exist_ok=True)
        open(os.path.join(root, "dev", "kfd"), "w").close()
    os.makedirs(os.path.join(root, "proc", "sys", "kernel"), exist_ok=True)
    with open(os.path.join(root, "proc", "sys", "kernel", "osrelease"), "w") as f:
        f.write(kernel + "\n")
    return root


def _so(path: str, soname: str, needed: list[str], libdirs: list[str], runpath: str | None) -> None:
    src = path + ".c"
    with open(src, "w") as f:
        f.write(f"int kpatch_fake_{abs(hash(soname)) % 100000}(void) {{ return 0; }}\n")
    cmd = ["gcc", "-shared", "-fPIC", "-o", path, src, f"-Wl,-soname,{soname}", "-Wl,--no-as-needed"]
    for d in libdirs:
        cmd.append(f"-L{d}")
    cmd += [f"-l:{n}" for n in needed]
    if runpath:
        cmd.append(f"-Wl,--enable-new-dtags,-rpath,{runpath}")
    subprocess.run(cmd, check=True, capture_output=True)
    os.unlink(src)


@dataclass
class FakeTorch:
    site: str  # put on PYTHONPATH
    dir: str  # .../torch
    lib: str


def make_torch(base: str, *, version: str = "2.3.1+rocm6.0", hip: str | None = "6.0.32830",
               libs: bool = True) -> FakeTorch:
    """A fake ROCm PyTorch install: a ``torch`` package reporting the
    versions, and in torch/lib the libraries a ROCm wheel bundles."""
    site = os.path.join(base, "site-packages")
    tdir = os.path.join(site, "torch")
    lib = os.path.join(tdir, "lib")
    os.makedirs(lib, exist_ok=True)
    with open(os.path.join(tdir, "__init__.py"), "w") as f:
        f.write(f"__version__ = {version!r}\nfrom . import version\n")
    with open(os.path.join(tdir, "version.py"), "w") as f:
        f.write(f"hip = {hip!r}\ncuda = None\n")
    if libs:
        _so(os.path.join(lib, "libhsa-runtime64.so.1"), "libhsa-runtime64.so.1", [], [], None)
        _so(os.path.join(lib, "libamdhip64.so.6"), "libamdhip64.so.6", ["libhsa-runtime64.so.1"], [lib], "$ORIGIN")
        _so(os.path.join(lib, "libMIOpen.so.1"), "libMIOpen.so.1", ["libamdhip64.so.6"], [lib], "$ORIGIN")
        _so(os.path.join(lib, "librocblas.so.4"), "librocblas.so.4", ["libamdhip64.so.6"], [lib], "$ORIGIN")
        _so(os.path.join(lib, "libtorch_hip.so"), "libtorch_hip.so",
            ["libamdhip64.so.6", "libMIOpen.so.1", "librocblas.so.4"], [lib], "$ORIGIN")
    return FakeTorch(site, tdir, lib)


def make_system_hip(base: str) -> str:
    """Another libamdhip64.so.6 (as /opt/rocm/lib has), needing the system's ROCr."""
    d = os.path.join(base, "opt", "rocm", "lib")
    os.makedirs(d, exist_ok=True)
    _so(os.path.join(d, "libhsa-runtime64.so.1"), "libhsa-runtime64.so.1", [], [], None)
    _so(os.path.join(d, "libamdhip64.so.6"), "libamdhip64.so.6", ["libhsa-runtime64.so.1"], [d], "$ORIGIN")
    return d


def env_for(torch: FakeTorch | None, **extra: str) -> dict:
    """An environment whose python (kpatch's own) imports the fake torch."""
    e = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "HSA_OVERRIDE_GFX_VERSION",
                                                          "PYTHONPATH", "ROCBLAS_TENSILE_LIBPATH")}
    if torch is not None:
        e["PYTHONPATH"] = torch.site
    e.update(extra)
    return e


PYTHON = sys.executable
