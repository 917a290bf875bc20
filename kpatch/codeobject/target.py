"""AMDGPU processors, ``e_flags`` and target ids.

:data:`MACHS` is the table of every ``EF_AMDGPU_MACH`` value LLVM defines
(``llvm/include/llvm/BinaryFormat/ELF.h``, AMDGPUUsage "AMDGPU
EF_AMDGPU_MACH Values"), with the target features (xnack, sramecc) each
processor supports.  ``tests/codeobject/data/readelf_mach_oracle.json``
(written by ``tools/gen_mach_oracle.py``) records what LLVM's own tools say
about each value; the tests check this table against it.

``e_flags`` layout by code object version (EI_ABIVERSION):

* V2, V3: mach in bits 0..7; XNACK_V3 = 0x100 and SRAMECC_V3 = 0x200 are
  plain on/off bits.  LLVM writes (and llvm-readobj reads) V2 objects this
  way too; the old V2-only bits XNACK_V2 = 0x01 / TRAP_HANDLER_V2 = 0x02
  overlap the mach field and are not interpreted.
* V4, V5, V6: two-bit fields XNACK = 0x300 and SRAMECC = 0xC00, each
  0 unsupported, 1 any, 2 off, 3 on.
* V6: generic targets, with the generic version in bits 24..31.  (AMDGPUUsage
  says generic targets need V6, but LLVM 19's assembler also writes a generic
  mach into V4/V5 objects, without a version; those are accepted.  V2/V3
  generic objects are rejected, as LLVM rejects them.)

A :class:`TargetId` is LLVM's target id: the processor plus the xnack and
sramecc settings, written ``gfx908:sramecc+:xnack-`` (LLVM writes sramecc
before xnack; a feature that is "any" or unsupported is left out).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kpatch.errors import FormatError, UsageError

EF_AMDGPU_MACH = 0x0FF
EF_AMDGPU_FEATURE_XNACK_V2 = 0x01
EF_AMDGPU_FEATURE_TRAP_HANDLER_V2 = 0x02
EF_AMDGPU_FEATURE_XNACK_V3 = 0x100
EF_AMDGPU_FEATURE_SRAMECC_V3 = 0x200
EF_AMDGPU_FEATURE_XNACK_V4 = 0x300
EF_AMDGPU_FEATURE_SRAMECC_V4 = 0xC00
EF_AMDGPU_GENERIC_VERSION = 0xFF000000
EF_AMDGPU_GENERIC_VERSION_OFFSET = 24

#: V4+ two-bit feature field value -> setting ('any' and 'unsupported' are None).
FEATURE_V4_SETTING = {0: None, 1: None, 2: "-", 3: "+"}

#: EI_ABIVERSION (for ELFOSABI_AMDGPU_HSA) -> code object version.
ABI_VERSION_TO_CODE_OBJECT = {0: 2, 1: 3, 2: 4, 3: 5, 4: 6}
CODE_OBJECT_TO_ABI_VERSION = {v: k for k, v in ABI_VERSION_TO_CODE_OBJECT.items()}

#: The triple LLVM puts in front of the target id in ``amdhsa.target``.
HSA_TRIPLE = "amdgcn-amd-amdhsa"


@dataclass(frozen=True)
class Mach:
    """One ``EF_AMDGPU_MACH`` value and what LLVM says about that processor."""

    value: int
    name: str  # LLVM processor name: gfx1030, gfx10-1-generic, r600 ...
    xnack: bool  # supports the xnack target feature
    sramecc: bool  # supports the sramecc target feature
    removed: bool = False  # dropped from current LLVM; the value is now reserved

    @property
    def arch(self) -> str:
        """``amdgcn`` or ``r600``."""
        return "amdgcn" if self.name.startswith("gfx") else "r600"

    @property
    def generic(self) -> bool:
        """A generic target (V6 only), e.g. ``gfx10-1-generic``."""
        return self.name.endswith("-generic")

    @property
    def enum(self) -> str:
        """LLVM's enumerator name, e.g. ``EF_AMDGPU_MACH_AMDGCN_GFX10_1_GENERIC``."""
        return f"EF_AMDGPU_MACH_{self.arch.upper()}_{self.name.upper().replace('-', '_')}"

    @property
    def gfx_major(self) -> int | None:
        """GFX IP major version (10 for gfx1030 and gfx10-3-generic), None for r600."""
        if self.arch != "amdgcn":
            return None
        if self.generic:  # gfx10-3-generic
            return int(re.match(r"gfx(\d+)", self.name).group(1))
        return int(self.name[3:-2])  # gfx1030 -> 10, gfx90a -> 9 (minor, stepping last)

    @property
    def descriptor_layout(self) -> str:
        """Which kernel-descriptor bit layout applies (see ``descriptor.LAYOUTS``)."""
        major = self.gfx_major or 0
        if self.name in ("gfx90a", "gfx940", "gfx941", "gfx942", "gfx950", "gfx9-4-generic"):
            return "gfx90a"
        if major <= 9:
            return "gfx6"
        if major == 10:
            return "gfx10"
        if major == 11:
            return "gfx11"
        return "gfx12"


X, XS = "x", "xs"  # feature columns: xnack, xnack + sramecc

# value, processor, supported features ("x" xnack, "s" sramecc), removed from LLVM.
# Everything LLVM 16 / 19 knows is checked against their tools (see the module
# doc).  Newer values (gfx950, gfx1153, gfx1154, gfx1170-gfx1172, gfx1250,
# gfx1251, gfx1310, gfx9-4-, gfx11-7-, gfx12-5-, gfx13-generic) come from LLVM
# main's ELF.h and AMDGPUUsage; gfx940 / gfx941 were removed in LLVM 20 and
# their values reserved.  0x027, 0x04d, 0x056, 0x060, 0x061 are reserved.
_TABLE: tuple[tuple[int, str, str, bool], ...] = (
    # R600 (32-bit ELF; never in an HSA code object, listed for completeness)
    (0x001, "r600", "", False), (0x002, "r630", "", False), (0x003, "rs880", "", False),
    (0x004, "rv670", "", False), (0x005, "rv710", "", False), (0x006, "rv730", "", False),
    (0x007, "rv770", "", False), (0x008, "cedar", "", False), (0x009, "cypress", "", False),
    (0x00A, "juniper", "", False), (0x00B, "redwood", "", False), (0x00C, "sumo", "", False),
    (0x00D, "barts", "", False), (0x00E, "caicos", "", False), (0x00F, "cayman", "", False),
    (0x010, "turks", "", False),
    # AMDGCN
    (0x020, "gfx600", "", False), (0x021, "gfx601", "", False), (0x022, "gfx700", "", False),
    (0x023, "gfx701", "", False), (0x024, "gfx702", "", False), (0x025, "gfx703", "", False),
    (0x026, "gfx704", "", False),
    (0x028, "gfx801", X, False), (0x029, "gfx802", "", False), (0x02A, "gfx803", "", False),
    (0x02B, "gfx810", X, False),
    (0x02C, "gfx900", X, False), (0x02D, "gfx902", X, False), (0x02E, "gfx904", X, False),
    (0x02F, "gfx906", XS, False), (0x030, "gfx908", XS, False), (0x031, "gfx909", X, False),
    (0x032, "gfx90c", X, False),
    (0x033, "gfx1010", X, False), (0x034, "gfx1011", X, False), (0x035, "gfx1012", X, False),
    (0x036, "gfx1030", "", False), (0x037, "gfx1031", "", False), (0x038, "gfx1032", "", False),
    (0x039, "gfx1033", "", False),
    (0x03A, "gfx602", "", False), (0x03B, "gfx705", "", False), (0x03C, "gfx805", "", False),
    (0x03D, "gfx1035", "", False), (0x03E, "gfx1034", "", False),
    (0x03F, "gfx90a", XS, False),
    (0x040, "gfx940", XS, True),
    (0x041, "gfx1100", "", False), (0x042, "gfx1013", X, False), (0x043, "gfx1150", "", False),
    (0x044, "gfx1103", "", False), (0x045, "gfx1036", "", False), (0x046, "gfx1101", "", False),
    (0x047, "gfx1102", "", False), (0x048, "gfx1200", "", False),
    (0x049, "gfx1250", XS, False),
    (0x04A, "gfx1151", "", False),
    (0x04B, "gfx941", XS, True),
    (0x04C, "gfx942", XS, False),
    (0x04E, "gfx1201", "", False),
    (0x04F, "gfx950", XS, False),
    (0x050, "gfx1310", "", False),
    (0x051, "gfx9-generic", X, False), (0x052, "gfx10-1-generic", X, False),
    (0x053, "gfx10-3-generic", "", False), (0x054, "gfx11-generic", "", False),
    (0x055, "gfx1152", "", False),
    (0x057, "gfx1154", "", False), (0x058, "gfx1153", "", False),
    (0x059, "gfx12-generic", "", False),
    (0x05A, "gfx1251", XS, False), (0x05B, "gfx12-5-generic", XS, False),
    (0x05C, "gfx1172", "", False), (0x05D, "gfx1170", "", False), (0x05E, "gfx1171", "", False),
    (0x05F, "gfx9-4-generic", XS, False),
    (0x062, "gfx11-7-generic", "", False), (0x063, "gfx13-generic", "", False),
)

#: Every EF_AMDGPU_MACH value LLVM defines (or defined), in value order.
MACHS: tuple[Mach, ...] = tuple(
    Mach(value, name, "x" in feats, "s" in feats, removed) for value, name, feats, removed in _TABLE)
MACH_BY_VALUE: dict[int, Mach] = {m.value: m for m in MACHS}
MACH_BY_NAME: dict[str, Mach] = {m.name: m for m in MACHS}


def mach_for_value(value: int) -> Mach:
    """The table entry for an EF_AMDGPU_MACH value; FormatError if unknown."""
    try:
        return MACH_BY_VALUE[value]
    except KeyError:
        raise FormatError(f"unknown EF_AMDGPU_MACH value {value:#05x}") from None


def mach_for_processor(name: str) -> Mach:
    """The table entry for a processor name; FormatError if unknown."""
    try:
        return MACH_BY_NAME[name]
    except KeyError:
        raise FormatError(f"unknown AMDGPU processor {name!r}") from None


_SETTINGS = (None, "+", "-")
_FEATURE_RE = re.compile(r"^(xnack|sramecc)([+-])$")


@dataclass(frozen=True)
class TargetId:
    """LLVM's target id: processor + xnack/sramecc settings (+ V6 generic version).

    ``xnack`` / ``sramecc`` are ``'+'`` (on), ``'-'`` (off) or None (any, or
    the processor does not support the feature).  ``generic_version`` is set
    only for generic targets read from V6 ``e_flags``.
    """

    processor: str
    xnack: str | None = None
    sramecc: str | None = None
    generic_version: int | None = None  # V6 generic targets only

    def __post_init__(self) -> None:
        if self.xnack not in _SETTINGS or self.sramecc not in _SETTINGS:
            raise UsageError(f"feature settings must be '+', '-' or None, not "
                             f"xnack={self.xnack!r} sramecc={self.sramecc!r}")
        if self.generic_version is not None and not 0 <= self.generic_version <= 0xFF:
            raise UsageError(f"generic version {self.generic_version} is not in 0..255")

    def __str__(self) -> str:
        out = self.processor
        if self.sramecc:
            out += ":sramecc" + self.sramecc
        if self.xnack:
            out += ":xnack" + self.xnack
        return out

    @property
    def mach(self) -> Mach:
        """The EF_AMDGPU_MACH table entry of the processor (FormatError if unknown)."""
        return mach_for_processor(self.processor)

    @property
    def hsa_target(self) -> str:
        """The ``amdhsa.target`` metadata string, e.g. ``amdgcn-amd-amdhsa--gfx1030``."""
        return f"{HSA_TRIPLE}--{self}"

    def problems(self) -> list[str]:
        """Reasons LLVM would reject this target id (empty if it is valid)."""
        try:
            mach = self.mach
        except FormatError as e:
            return [e.reason]
        out = []
        if self.xnack and not mach.xnack:
            out.append(f"{self.processor} does not support xnack")
        if self.sramecc and not mach.sramecc:
            out.append(f"{self.processor} does not support sramecc")
        return out

    @classmethod
    def parse(cls, text: str) -> "TargetId":
        """Parse ``gfx90a:xnack+`` or ``amdgcn-amd-amdhsa--gfx90a:xnack+``.

        Features may come in any order; unknown processors, unknown features,
        repeated features and missing signs are a FormatError.
        """
        if not isinstance(text, str):
            raise FormatError(f"target id must be a string, not {type(text).__name__}")
        tid = text
        if "--" in tid:
            triple, _, tid = tid.rpartition("--")
            if triple != HSA_TRIPLE:
                raise FormatError(f"target {text!r}: triple {triple!r} is not {HSA_TRIPLE!r}")
        processor, *features = tid.split(":")
        mach_for_processor(processor)
        settings: dict[str, str] = {}
        for feat in features:
            m = _FEATURE_RE.match(feat)
            if not m:
                raise FormatError(f"target id {text!r}: bad feature {feat!r} "
                                  "(expected xnack+/xnack-/sramecc+/sramecc-)")
            if m.group(1) in settings:
                raise FormatError(f"target id {text!r}: feature {m.group(1)} given twice")
            settings[m.group(1)] = m.group(2)
        return cls(processor, settings.get("xnack"), settings.get("sramecc"))


def code_object_version_for_abi(abi_version: int) -> int:
    """Code object version (2..6) for an HSA EI_ABIVERSION; FormatError if unknown."""
    try:
        return ABI_VERSION_TO_CODE_OBJECT[abi_version]
    except KeyError:
        raise FormatError(f"unknown code object version (EI_ABIVERSION={abi_version})") from None


def _check_version(code_object_version: int, error: type) -> None:
    if code_object_version not in CODE_OBJECT_TO_ABI_VERSION:
        raise error(f"unknown code object version {code_object_version} (expected 2..6)")


def target_from_e_flags(e_flags: int, code_object_version: int) -> TargetId:
    """The target id that ``e_flags`` of a code object of this version describes.

    FormatError for an unknown mach value, reserved bits that are set, a
    generic target outside V6, or a generic version that does not fit the
    target (0 for a generic target, non-zero for a specific one).
    """
    _check_version(code_object_version, FormatError)
    if not 0 <= e_flags <= 0xFFFFFFFF:
        raise FormatError(f"e_flags {e_flags:#x} is not a 32-bit value")
    mach = mach_for_value(e_flags & EF_AMDGPU_MACH)
    if code_object_version <= 3:
        known = EF_AMDGPU_MACH | EF_AMDGPU_FEATURE_XNACK_V3 | EF_AMDGPU_FEATURE_SRAMECC_V3
        xnack_on = bool(e_flags & EF_AMDGPU_FEATURE_XNACK_V3)
        sramecc_on = bool(e_flags & EF_AMDGPU_FEATURE_SRAMECC_V3)
        xnack = "+" if xnack_on else ("-" if mach.xnack else None)
        sramecc = "+" if sramecc_on else ("-" if mach.sramecc else None)
    else:
        known = EF_AMDGPU_MACH | EF_AMDGPU_FEATURE_XNACK_V4 | EF_AMDGPU_FEATURE_SRAMECC_V4
        if code_object_version >= 6:
            known |= EF_AMDGPU_GENERIC_VERSION
        xnack = FEATURE_V4_SETTING[(e_flags & EF_AMDGPU_FEATURE_XNACK_V4) >> 8]
        sramecc = FEATURE_V4_SETTING[(e_flags & EF_AMDGPU_FEATURE_SRAMECC_V4) >> 10]
    if e_flags & ~known:
        raise FormatError(f"e_flags {e_flags:#x} has bits {e_flags & ~known:#x} set that "
                          f"code object V{code_object_version} does not define")
    generic_version = None
    if mach.generic:
        if code_object_version < 4:
            raise FormatError(f"generic target {mach.name} in a code object "
                              f"V{code_object_version} (generic targets need V4+, normally V6)")
        if code_object_version >= 6:
            generic_version = e_flags >> EF_AMDGPU_GENERIC_VERSION_OFFSET
            if generic_version == 0:
                raise FormatError(f"generic target {mach.name} with generic version 0")
    elif e_flags & EF_AMDGPU_GENERIC_VERSION:
        raise FormatError(f"specific target {mach.name} with a generic version "
                          f"({e_flags >> EF_AMDGPU_GENERIC_VERSION_OFFSET})")
    return TargetId(mach.name, xnack, sramecc, generic_version)


def e_flags_for(target: TargetId, code_object_version: int) -> int:
    """The ``e_flags`` LLVM writes for ``target`` in a code object of this version.

    A feature left as None becomes "any" when the processor supports it
    (V3 has no "any": LLVM sets the bit) and "unsupported" otherwise.
    """
    _check_version(code_object_version, UsageError)
    try:
        mach = target.mach
    except FormatError as e:
        raise UsageError(e.reason) from None
    flags = mach.value
    if code_object_version <= 3:
        if target.xnack == "+" or (target.xnack is None and mach.xnack):
            flags |= EF_AMDGPU_FEATURE_XNACK_V3
        if target.sramecc == "+" or (target.sramecc is None and mach.sramecc):
            flags |= EF_AMDGPU_FEATURE_SRAMECC_V3
    else:
        field = {"+": 3, "-": 2}
        flags |= field.get(target.xnack, 1 if mach.xnack else 0) << 8
        flags |= field.get(target.sramecc, 1 if mach.sramecc else 0) << 10
    if mach.generic and code_object_version >= 6:
        if not target.generic_version:
            raise UsageError(f"generic target {mach.name} needs a generic version (1..255)")
        flags |= target.generic_version << EF_AMDGPU_GENERIC_VERSION_OFFSET
    elif mach.generic and code_object_version < 4:
        raise UsageError(f"generic target {mach.name} needs code object V4+ (normally V6)")
    elif target.generic_version:
        raise UsageError(f"{mach.name} has no generic version in code object "
                         f"V{code_object_version}" if mach.generic else
                         f"{mach.name} is not a generic target; it has no generic version")
    return flags
