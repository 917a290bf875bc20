"""The 64-byte AMDHSA kernel descriptor (code object V3+), every field named.

:data:`KD` gives the fields at their byte offsets; :data:`LAYOUTS` gives,
per GPU generation, the bit fields of ``COMPUTE_PGM_RSRC1/2/3``,
``KERNEL_CODE_PROPERTIES`` and ``KERNARG_PRELOAD``.  Names follow
AMDGPUUsage's "Kernel Descriptor" tables and LLVM's
``AMDHSAKernelDescriptor.h``; reserved bits get ``<REGISTER>_RESERVED<n>``
names so that every bit has one.

:class:`KernelDescriptor` keeps the 64 bytes and reads / writes fields in
place, so ``from_bytes(b).to_bytes() == b`` always, including reserved bits.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from kpatch.elf.layout import Layout
from kpatch.errors import FormatError, UsageError

KD_SIZE = 64

#: Byte layout of the descriptor (same for every generation).
KD = Layout("kernel descriptor", [
    ("GROUP_SEGMENT_FIXED_SIZE", "I"),  # 0
    ("PRIVATE_SEGMENT_FIXED_SIZE", "I"),  # 4
    ("KERNARG_SIZE", "I"),  # 8
    ("RESERVED0", "4s"),  # 12
    ("KERNEL_CODE_ENTRY_BYTE_OFFSET", "q"),  # 16: entry address - descriptor address
    ("RESERVED1", "20s"),  # 24
    ("COMPUTE_PGM_RSRC3", "I"),  # 44: GFX90A, GFX10+
    ("COMPUTE_PGM_RSRC1", "I"),  # 48
    ("COMPUTE_PGM_RSRC2", "I"),  # 52
    ("KERNEL_CODE_PROPERTIES", "H"),  # 56
    ("KERNARG_PRELOAD", "H"),  # 58
    ("RESERVED2", "4s"),  # 60
])
assert KD.size == KD_SIZE

_WORD_OFFSETS = {name: KD.offset_of(name) for name, _ in KD.fields}
_WORD_SIZES = {name: struct.calcsize("<" + code) for name, code in KD.fields}
_SIGNED = {"KERNEL_CODE_ENTRY_BYTE_OFFSET"}
#: name -> (offset, size, signed, a struct reading it when it is 1, 2, 4 or 8 bytes, else None)
_WORD_READ = {name: (_WORD_OFFSETS[name], _WORD_SIZES[name], name in _SIGNED,
                     struct.Struct("<" + {1: "b", 2: "h", 4: "i", 8: "q"}[_WORD_SIZES[name]]
                                   if name in _SIGNED else "<" + {1: "B", 2: "H", 4: "I", 8: "Q"}[_WORD_SIZES[name]])
                     if _WORD_SIZES[name] in (1, 2, 4, 8) else None)
              for name, _ in KD.fields}


@dataclass(frozen=True)
class BitField:
    """``width`` bits at ``lsb`` of the descriptor word ``word``."""

    name: str
    word: str
    lsb: int
    width: int

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb


def _bits(word: str, *spec: tuple[str, int, int]) -> list[BitField]:
    fields = [BitField(name, word, lsb, width) for name, lsb, width in spec]
    covered = sum(f.width for f in fields)
    size = _WORD_SIZES[word] * 8
    assert covered == size, (word, covered, size)  # every bit has a name
    return fields


_R1, _R2, _R3 = "COMPUTE_PGM_RSRC1", "COMPUTE_PGM_RSRC2", "COMPUTE_PGM_RSRC3"

_RSRC1_LOW = [
    ("GRANULATED_WORKITEM_VGPR_COUNT", 0, 6),
    ("GRANULATED_WAVEFRONT_SGPR_COUNT", 6, 4),  # GFX10+: LLVM writes 0 (older LLVM did not)
    ("PRIORITY", 10, 2),
    ("FLOAT_ROUND_MODE_32", 12, 2),
    ("FLOAT_ROUND_MODE_16_64", 14, 2),
    ("FLOAT_DENORM_MODE_32", 16, 2),
    ("FLOAT_DENORM_MODE_16_64", 18, 2),
    ("PRIV", 20, 1),
]
_RSRC1_MID_GFX6_11 = [
    ("ENABLE_DX10_CLAMP", 21, 1), ("DEBUG_MODE", 22, 1), ("ENABLE_IEEE_MODE", 23, 1),
    ("BULKY", 24, 1), ("CDBG_USER", 25, 1), ("FP16_OVFL", 26, 1),  # FP16_OVFL: GFX9+
    ("COMPUTE_PGM_RSRC1_RESERVED0", 27, 2),
]
_RSRC1_MID_GFX12 = [
    ("ENABLE_WG_RR_EN", 21, 1), ("DEBUG_MODE", 22, 1), ("DISABLE_PERF", 23, 1),
    ("BULKY", 24, 1), ("CDBG_USER", 25, 1), ("FP16_OVFL", 26, 1),
    ("COMPUTE_PGM_RSRC1_RESERVED0", 27, 2),
]
_RSRC1_HIGH_GFX6_9 = [("COMPUTE_PGM_RSRC1_RESERVED1", 29, 3)]
_RSRC1_HIGH_GFX10 = [("WGP_MODE", 29, 1), ("MEM_ORDERED", 30, 1), ("FWD_PROGRESS", 31, 1)]

_RSRC2_LOW = [("ENABLE_PRIVATE_SEGMENT", 0, 1), ("USER_SGPR_COUNT", 1, 5)]
_RSRC2_MID = [
    ("ENABLE_SGPR_WORKGROUP_ID_X", 7, 1),
    ("ENABLE_SGPR_WORKGROUP_ID_Y", 8, 1),
    ("ENABLE_SGPR_WORKGROUP_ID_Z", 9, 1),
    ("ENABLE_SGPR_WORKGROUP_INFO", 10, 1),
    ("ENABLE_VGPR_WORKITEM_ID", 11, 2),
    ("ENABLE_EXCEPTION_ADDRESS_WATCH", 13, 1),
    ("ENABLE_EXCEPTION_MEMORY", 14, 1),
    ("GRANULATED_LDS_SIZE", 15, 9),
    ("ENABLE_EXCEPTION_IEEE_754_FP_INVALID_OPERATION", 24, 1),
    ("ENABLE_EXCEPTION_FP_DENORMAL_SOURCE", 25, 1),
    ("ENABLE_EXCEPTION_IEEE_754_FP_DIVISION_BY_ZERO", 26, 1),
    ("ENABLE_EXCEPTION_IEEE_754_FP_OVERFLOW", 27, 1),
    ("ENABLE_EXCEPTION_IEEE_754_FP_UNDERFLOW", 28, 1),
    ("ENABLE_EXCEPTION_IEEE_754_FP_INEXACT", 29, 1),
    ("ENABLE_EXCEPTION_INT_DIVIDE_BY_ZERO", 30, 1),
]
_RSRC2_GFX6_11 = (_RSRC2_LOW + [("ENABLE_TRAP_HANDLER", 6, 1)] + _RSRC2_MID
                  + [("COMPUTE_PGM_RSRC2_RESERVED0", 31, 1)])
_RSRC2_GFX12 = (_RSRC2_LOW + [("ENABLE_DYNAMIC_VGPR", 6, 1)] + _RSRC2_MID
                + [("WGP_TAKEOVER", 31, 1)])

_RSRC3 = {
    "gfx6": [("COMPUTE_PGM_RSRC3_RESERVED0", 0, 32)],  # no RSRC3 before GFX90A/GFX10
    "gfx90a": [("ACCUM_OFFSET", 0, 6), ("COMPUTE_PGM_RSRC3_RESERVED0", 6, 10),
               ("TG_SPLIT", 16, 1), ("COMPUTE_PGM_RSRC3_RESERVED1", 17, 15)],
    "gfx10": [("SHARED_VGPR_COUNT", 0, 4), ("COMPUTE_PGM_RSRC3_RESERVED0", 4, 8),
              ("COMPUTE_PGM_RSRC3_RESERVED1", 12, 1), ("COMPUTE_PGM_RSRC3_RESERVED2", 13, 1),
              ("COMPUTE_PGM_RSRC3_RESERVED3", 14, 17), ("COMPUTE_PGM_RSRC3_RESERVED4", 31, 1)],
    "gfx11": [("SHARED_VGPR_COUNT", 0, 4), ("INST_PREF_SIZE", 4, 6), ("TRAP_ON_START", 10, 1),
              ("TRAP_ON_END", 11, 1), ("COMPUTE_PGM_RSRC3_RESERVED0", 12, 19),
              ("IMAGE_OP", 31, 1)],
    "gfx12": [("COMPUTE_PGM_RSRC3_RESERVED0", 0, 4), ("INST_PREF_SIZE", 4, 8),
              ("COMPUTE_PGM_RSRC3_RESERVED1", 12, 1), ("GLG_EN", 13, 1),
              ("COMPUTE_PGM_RSRC3_RESERVED2", 14, 17), ("IMAGE_OP", 31, 1)],
}

_CODE_PROPERTIES = _bits(
    "KERNEL_CODE_PROPERTIES",
    ("ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER", 0, 1),
    ("ENABLE_SGPR_DISPATCH_PTR", 1, 1),
    ("ENABLE_SGPR_QUEUE_PTR", 2, 1),
    ("ENABLE_SGPR_KERNARG_SEGMENT_PTR", 3, 1),
    ("ENABLE_SGPR_DISPATCH_ID", 4, 1),
    ("ENABLE_SGPR_FLAT_SCRATCH_INIT", 5, 1),
    ("ENABLE_SGPR_PRIVATE_SEGMENT_SIZE", 6, 1),
    ("KERNEL_CODE_PROPERTIES_RESERVED0", 7, 3),
    ("ENABLE_WAVEFRONT_SIZE32", 10, 1),  # GFX10+
    ("USES_DYNAMIC_STACK", 11, 1),
    ("KERNEL_CODE_PROPERTIES_RESERVED1", 12, 4),
)
_KERNARG_PRELOAD = _bits(
    "KERNARG_PRELOAD",
    ("KERNARG_PRELOAD_SPEC_LENGTH", 0, 7),
    ("KERNARG_PRELOAD_SPEC_OFFSET", 7, 9),
)


def _layout(rsrc1_mid, rsrc1_high, rsrc2, rsrc3) -> dict[str, BitField]:
    fields = (_bits(_R1, *_RSRC1_LOW, *rsrc1_mid, *rsrc1_high) + _bits(_R2, *rsrc2)
              + _bits(_R3, *rsrc3) + _CODE_PROPERTIES + _KERNARG_PRELOAD)
    out = {f.name: f for f in fields}
    assert len(out) == len(fields)
    return out


#: Bit fields per descriptor layout.  ``gfx6`` covers GFX6-GFX9 except the
#: GFX90A family (gfx90a, gfx94x, gfx950), which has ACCUM_OFFSET / TG_SPLIT.
LAYOUTS: dict[str, dict[str, BitField]] = {
    "gfx6": _layout(_RSRC1_MID_GFX6_11, _RSRC1_HIGH_GFX6_9, _RSRC2_GFX6_11, _RSRC3["gfx6"]),
    "gfx90a": _layout(_RSRC1_MID_GFX6_11, _RSRC1_HIGH_GFX6_9, _RSRC2_GFX6_11, _RSRC3["gfx90a"]),
    "gfx10": _layout(_RSRC1_MID_GFX6_11, _RSRC1_HIGH_GFX10, _RSRC2_GFX6_11, _RSRC3["gfx10"]),
    "gfx11": _layout(_RSRC1_MID_GFX6_11, _RSRC1_HIGH_GFX10, _RSRC2_GFX6_11, _RSRC3["gfx11"]),
    "gfx12": _layout(_RSRC1_MID_GFX12, _RSRC1_HIGH_GFX10, _RSRC2_GFX12, _RSRC3["gfx12"]),
}
DEFAULT_LAYOUT = "gfx10"


class KernelDescriptor:
    """One kernel descriptor: 64 bytes, read and written field by field."""

    __slots__ = ("_data", "layout")

    def __init__(self, data: bytes = bytes(KD_SIZE), layout: str = DEFAULT_LAYOUT):
        if layout not in LAYOUTS:
            raise UsageError(f"unknown kernel descriptor layout {layout!r} "
                             f"(known: {', '.join(LAYOUTS)})")
        if len(data) != KD_SIZE:
            raise FormatError(f"a kernel descriptor is {KD_SIZE} bytes, got {len(data)}")
        self._data = bytearray(data)
        self.layout = layout

    @classmethod
    def from_bytes(cls, data: bytes, layout: str = DEFAULT_LAYOUT) -> "KernelDescriptor":
        """Read a descriptor; exactly 64 bytes, else FormatError."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise FormatError(f"kernel descriptor must be bytes, not {type(data).__name__}")
        return cls(bytes(data), layout)

    def to_bytes(self) -> bytes:
        return bytes(self._data)

    def copy(self) -> "KernelDescriptor":
        return KernelDescriptor(bytes(self._data), self.layout)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, KernelDescriptor) and self._data == other._data
                and self.layout == other.layout)

    def __repr__(self) -> str:
        return f"KernelDescriptor({self.to_bytes().hex()}, layout={self.layout!r})"

    # -- generic access ----------------------------------------------------
    @property
    def bit_fields(self) -> dict[str, BitField]:
        """The bit fields of this descriptor's layout, by name."""
        return LAYOUTS[self.layout]

    def names(self) -> list[str]:
        """Every field name: the descriptor words, then their bit fields."""
        return [name for name, _ in KD.fields] + list(self.bit_fields)

    def fields(self) -> dict[str, int]:
        """Every word and every bit field, by name, as integers."""
        return {name: self.get(name) for name in self.names()}

    def _word(self, name: str) -> int:
        off, size, signed, reader = _WORD_READ[name]
        if reader is not None:
            return reader.unpack_from(self._data, off)[0]
        return int.from_bytes(self._data[off:off + size], "little", signed=signed)

    def _set_word(self, name: str, value: int) -> None:
        off, size = _WORD_OFFSETS[name], _WORD_SIZES[name]
        signed = name in _SIGNED
        try:
            self._data[off:off + size] = int(value).to_bytes(size, "little", signed=signed)
        except OverflowError:
            raise UsageError(f"{value} does not fit the {size * 8}-bit field {name}") from None

    def get(self, name: str) -> int:
        """The value of a word (``COMPUTE_PGM_RSRC1``) or bit field (``WGP_MODE``)."""
        word = _WORD_READ.get(name)
        if word is not None:
            off, size, signed, reader = word
            if reader is not None:
                return reader.unpack_from(self._data, off)[0]
            return int.from_bytes(self._data[off:off + size], "little", signed=signed)
        f = self.bit_fields.get(name)
        if f is None:
            raise UsageError(f"no kernel descriptor field {name!r} in layout {self.layout}")
        return (self._word(f.word) & f.mask) >> f.lsb

    def set(self, name: str, value: int) -> None:
        """Set a word or bit field; UsageError if the value does not fit."""
        if name in _WORD_OFFSETS:
            self._set_word(name, value)
            return
        f = self.bit_fields.get(name)
        if f is None:
            raise UsageError(f"no kernel descriptor field {name!r} in layout {self.layout}")
        if not 0 <= value < (1 << f.width):
            raise UsageError(f"{value} does not fit the {f.width}-bit field {name}")
        self._set_word(f.word, (self._word(f.word) & ~f.mask) | (value << f.lsb))

    __getitem__ = get
    __setitem__ = set

    # -- named views ---------------------------------------------------------
    @property
    def group_segment_fixed_size(self) -> int:
        return self.get("GROUP_SEGMENT_FIXED_SIZE")

    @property
    def private_segment_fixed_size(self) -> int:
        return self.get("PRIVATE_SEGMENT_FIXED_SIZE")

    @property
    def kernarg_size(self) -> int:
        return self.get("KERNARG_SIZE")

    @property
    def kernel_code_entry_byte_offset(self) -> int:
        """Entry address minus the descriptor's own address (signed)."""
        return self.get("KERNEL_CODE_ENTRY_BYTE_OFFSET")

    @kernel_code_entry_byte_offset.setter
    def kernel_code_entry_byte_offset(self, value: int) -> None:
        self.set("KERNEL_CODE_ENTRY_BYTE_OFFSET", value)

    @property
    def compute_pgm_rsrc1(self) -> int:
        return self.get("COMPUTE_PGM_RSRC1")

    @property
    def compute_pgm_rsrc2(self) -> int:
        return self.get("COMPUTE_PGM_RSRC2")

    @property
    def compute_pgm_rsrc3(self) -> int:
        return self.get("COMPUTE_PGM_RSRC3")

    @property
    def kernel_code_properties(self) -> int:
        return self.get("KERNEL_CODE_PROPERTIES")

    @property
    def wgp_mode(self) -> bool:
        """RSRC1.WGP_MODE (GFX10+): True = WGP mode, False = CU mode."""
        return bool(self.get("WGP_MODE"))

    @wgp_mode.setter
    def wgp_mode(self, on: bool) -> None:
        self.set("WGP_MODE", int(bool(on)))

    @property
    def wavefront_size(self) -> int:
        """32 if ENABLE_WAVEFRONT_SIZE32 is set, else 64."""
        return 32 if self.get("ENABLE_WAVEFRONT_SIZE32") else 64

    @wavefront_size.setter
    def wavefront_size(self, size: int) -> None:
        if size not in (32, 64):
            raise UsageError(f"wavefront size must be 32 or 64, not {size}")
        self.set("ENABLE_WAVEFRONT_SIZE32", int(size == 32))

    @property
    def vgpr_granule(self) -> int:
        """VGPRs per GRANULATED_WORKITEM_VGPR_COUNT step (AMDGPUUsage)."""
        if self.layout == "gfx90a":
            return 8
        if self.layout in ("gfx10", "gfx11", "gfx12") and self.wavefront_size == 32:
            return 8
        return 4

    @property
    def vgpr_blocks_count(self) -> int:
        """VGPRs the hardware allocates: (GRANULATED_WORKITEM_VGPR_COUNT + 1) * granule."""
        return (self.get("GRANULATED_WORKITEM_VGPR_COUNT") + 1) * self.vgpr_granule

    @property
    def sgpr_blocks_count(self) -> int:
        """SGPRs GFX6-GFX9 allocate: (GRANULATED_WAVEFRONT_SGPR_COUNT + 1) * 8."""
        return (self.get("GRANULATED_WAVEFRONT_SGPR_COUNT") + 1) * 8
