"""Which mode and which CU count `kpatch apply` writes for, from the machine.

* Mode: ``HSA_OVERRIDE_GFX_VERSION=10.3.0`` means the HSA runtime presents
  the GPU as gfx1030 (``override``); without an override, a KFD node whose
  ``gfx_target_version`` is 100100 (gfx1010) means ``native``.  Anything
  else: a :class:`UsageError` asking for ``--mode``.
* CU count: the number MIOpen puts in its DB file names (its
  ``GetMaxComputeUnits``): ``MIOPEN_DEVICE_CU`` when set, else what HIP
  reports, which on gfx10+ (WGP mode) is CUs / 2.  KFD gives the CUs as
  ``simd_count / simd_per_cu``.

KFD's topology lives in ``<sysfs>/class/kfd/kfd/topology/nodes/<n>/properties``
(one ``key value`` per line); the sysfs root is a parameter so tests can use
a fake tree.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from kpatch.errors import UsageError

KFD_NODES = os.path.join("class", "kfd", "kfd", "topology", "nodes")
OVERRIDE_VALUE = "10.3.0"
GFX1010_VERSION = 100100
GFX1030_VERSION = 100300


def processor_name(gfx_target_version: int) -> str:
    """``gfx_target_version`` (major*10000 + minor*100 + stepping) as a
    processor name: 100100 -> gfx1010, 90010 -> gfx90a."""
    major, minor, step = gfx_target_version // 10000, gfx_target_version // 100 % 100, gfx_target_version % 100
    return f"gfx{major}{minor:x}{step:x}"


@dataclass(frozen=True)
class GpuNode:
    """One GPU node of the KFD topology."""

    node: str
    gfx_target_version: int
    simd_count: int
    simd_per_cu: int

    @property
    def processor(self) -> str:
        return processor_name(self.gfx_target_version)

    @property
    def compute_units(self) -> int | None:
        return self.simd_count // self.simd_per_cu if self.simd_per_cu > 0 else None

    @property
    def miopen_cu(self) -> int | None:
        """The count HIP reports and MIOpen uses: CUs / 2 on gfx10+ (WGP mode)."""
        cus = self.compute_units
        if cus is None:
            return None
        return cus // 2 if self.gfx_target_version >= 100000 else cus


def _properties(path: str) -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    try:
                        out[parts[0]] = int(parts[1])
                    except ValueError:
                        pass
    except OSError:
        return {}
    return out


def read_gpu_nodes(sysfs_root: str = "/sys") -> list[GpuNode]:
    """GPU nodes (``simd_count`` > 0) of the KFD topology under ``sysfs_root``,
    sorted by node number; [] when there is no KFD."""
    base = os.path.join(sysfs_root, KFD_NODES)
    try:
        names = os.listdir(base)
    except OSError:
        return []
    out = []
    for name in sorted(names, key=lambda n: (not n.isdigit(), int(n) if n.isdigit() else 0, n)):
        p = _properties(os.path.join(base, name, "properties"))
        if p.get("simd_count", 0) > 0 and p.get("gfx_target_version", 0) > 0:
            out.append(GpuNode(name, p["gfx_target_version"], p["simd_count"], p.get("simd_per_cu", 0)))
    return out


@dataclass(frozen=True)
class Choice:
    """A value and why it was chosen (shown to the user)."""

    value: object
    why: str


def _gpus_text(nodes: list[GpuNode]) -> str:
    return ", ".join(f"node {n.node}: {n.processor}" for n in nodes) or "no GPU in the KFD topology"


def detect_mode(env: Mapping[str, str], nodes: list[GpuNode]) -> Choice:
    """The mode for this machine (see the module doc); UsageError when it
    cannot tell."""
    override = env.get("HSA_OVERRIDE_GFX_VERSION", "").strip()
    if override == OVERRIDE_VALUE:
        return Choice("override", f"HSA_OVERRIDE_GFX_VERSION={override}")
    if override:
        raise UsageError(f"HSA_OVERRIDE_GFX_VERSION={override} is not {OVERRIDE_VALUE}: kpatch cannot tell "
                         "which code your GPU will load; pass --mode override, native or relabel")
    gfx1010 = [n for n in nodes if n.gfx_target_version == GFX1010_VERSION]
    if gfx1010:
        return Choice("native", f"no HSA_OVERRIDE_GFX_VERSION and a gfx1010 GPU (KFD node {gfx1010[0].node})")
    raise UsageError(f"cannot tell the mode: no HSA_OVERRIDE_GFX_VERSION and no gfx1010 GPU "
                     f"({_gpus_text(nodes)}); pass --mode override (HSA_OVERRIDE_GFX_VERSION=10.3.0), "
                     "--mode native (ROCm built for gfx1010) or --mode relabel")


def _positive(text: str, what: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        value = 0
    if value <= 0:
        raise UsageError(f"{what} must be a positive whole number, not {text!r}")
    return value


def detect_cu(cu: int | None, env: Mapping[str, str], nodes: list[GpuNode]) -> Choice:
    """The CU count for the DB file name: ``cu`` if given, else
    ``MIOPEN_DEVICE_CU``, else the gfx1010 GPU's (or the only GPU's) CUs / 2
    from KFD; UsageError asking for ``--cu`` otherwise."""
    if cu is not None:
        if cu <= 0:
            raise UsageError(f"--cu must be positive, not {cu}")
        return Choice(cu, "--cu")
    if env.get("MIOPEN_DEVICE_CU", "").strip():
        return Choice(_positive(env["MIOPEN_DEVICE_CU"].strip(), "MIOPEN_DEVICE_CU"), "MIOPEN_DEVICE_CU")
    candidates = [n for n in nodes if n.gfx_target_version == GFX1010_VERSION] or nodes
    counts = {n.miopen_cu for n in candidates if n.miopen_cu}
    if len(counts) == 1:
        n = next(x for x in candidates if x.miopen_cu)
        return Choice(counts.pop(), f"KFD node {n.node} ({n.processor}): {n.simd_count} SIMDs / "
                                    f"{n.simd_per_cu} per CU = {n.compute_units} CUs, / 2 in WGP mode")
    if len(counts) > 1:
        raise UsageError(f"several GPUs with different CU counts ({_gpus_text(candidates)}); pass --cu N "
                         "(the CU count MIOpen uses: CUs / 2 on RDNA, e.g. 18 for an RX 5600 XT)")
    raise UsageError("cannot find the GPU's CU count (no KFD topology, no MIOPEN_DEVICE_CU); pass --cu N "
                     "(the CU count MIOpen uses: CUs / 2 on RDNA, e.g. 18 for an RX 5600 XT, 20 for an RX 5700 XT)")
