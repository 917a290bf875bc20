"""GFX10 instruction formats described as data.

Each :class:`Format` says how to recognise an encoding from its first dword
(``match_mask``/``match_value``, tested in :data:`FORMAT_ORDER`), how many
bytes the base encoding has, where its opcode lives and which named fields it
has.  A field is ``(name, first_bit, width)`` with bits counted over the
little-endian concatenation of the instruction's dwords (bit 32 is bit 0 of
the second dword).  Opcodes split over several bit ranges (MUBUF, MTBUF,
MIMG) list their pieces in ``opcode_bits`` from least significant up.

Extra dwords that follow some base encodings (SDWA, DPP16, DPP8, MIMG NSA
addresses) are formats of their own (:data:`EXTRA_FORMATS`) with fields
counted from bit 0 of the extra dword.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Field:
    """One named bit field: ``width`` bits starting at bit ``lo``."""

    name: str
    lo: int
    width: int
    mask: int = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "mask", (1 << self.width) - 1)

    def get(self, value: int) -> int:
        """Extract the field from an integer holding the instruction bits."""
        return (value >> self.lo) & self.mask

    def put(self, value: int, field_value: int) -> int:
        """Return ``value`` with this field replaced by ``field_value``."""
        if field_value < 0 or field_value > self.mask:
            raise ValueError(f"{self.name}={field_value} does not fit in {self.width} bits")
        return (value & ~(self.mask << self.lo)) | (field_value << self.lo)


@dataclass(frozen=True)
class Format:
    """A GFX10 encoding family."""

    name: str
    size: int  # bytes of the base encoding, without literal/extra dwords
    match_mask: int  # applied to the first dword
    match_value: int
    opcode_bits: tuple[tuple[int, int], ...]  # (lo, width) pieces, LSB first
    fields: tuple[Field, ...] = field(default=())

    def opcode(self, value: int) -> int:
        """The opcode of an encoding held as an integer."""
        op = 0
        shift = 0
        for lo, width in self.opcode_bits:
            op |= ((value >> lo) & ((1 << width) - 1)) << shift
            shift += width
        return op

    def with_opcode(self, value: int, opcode: int) -> int:
        """``value`` with its opcode bits replaced."""
        for lo, width in self.opcode_bits:
            m = (1 << width) - 1
            value = (value & ~(m << lo)) | ((opcode & m) << lo)
            opcode >>= width
        return value

    @property
    def opcode_count(self) -> int:
        return 1 << sum(w for _, w in self.opcode_bits)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def fixed_bits(self) -> int:
        """The identification bits, as they appear in the first dword."""
        return self.match_value

    def extractor(self):
        """A function int -> {field: value} for this format's fields (generated
        once from the field table: much faster than a loop over fields)."""
        return make_extractor(self.fields)


def make_extractor(fields):
    """Compile ``lambda w: {name: (w >> lo) & mask, ...}`` for ``fields``."""
    body = ", ".join(f"{f.name!r}: (w >> {f.lo}) & {f.mask:#x}" for f in fields)
    return eval(f"lambda w: {{{body}}}")  # generated from the declarative table


def _f(*specs: tuple[str, int, int]) -> tuple[Field, ...]:
    return tuple(Field(n, lo, w) for n, lo, w in specs)


D1 = 32  # first bit of the second dword

SOP1 = Format("SOP1", 4, 0xFF800000, 0xBE800000, ((8, 8),),
              _f(("ssrc0", 0, 8), ("op", 8, 8), ("sdst", 16, 7)))
SOPC = Format("SOPC", 4, 0xFF800000, 0xBF000000, ((16, 7),),
              _f(("ssrc0", 0, 8), ("ssrc1", 8, 8), ("op", 16, 7)))
SOPP = Format("SOPP", 4, 0xFF800000, 0xBF800000, ((16, 7),),
              _f(("simm16", 0, 16), ("op", 16, 7)))
SOPK = Format("SOPK", 4, 0xF0000000, 0xB0000000, ((23, 5),),
              _f(("simm16", 0, 16), ("sdst", 16, 7), ("op", 23, 5)))
SOP2 = Format("SOP2", 4, 0xC0000000, 0x80000000, ((23, 7),),
              _f(("ssrc0", 0, 8), ("ssrc1", 8, 8), ("sdst", 16, 7), ("op", 23, 7)))
VOPC = Format("VOPC", 4, 0xFE000000, 0x7C000000, ((17, 8),),
              _f(("src0", 0, 9), ("vsrc1", 9, 8), ("op", 17, 8)))
VOP1 = Format("VOP1", 4, 0xFE000000, 0x7E000000, ((9, 8),),
              _f(("src0", 0, 9), ("op", 9, 8), ("vdst", 17, 8)))
VOP2 = Format("VOP2", 4, 0x80000000, 0x00000000, ((25, 6),),
              _f(("src0", 0, 9), ("vsrc1", 9, 8), ("vdst", 17, 8), ("op", 25, 6)))
VINTRP = Format("VINTRP", 4, 0xFC000000, 0xC8000000, ((16, 2),),
                _f(("vsrc", 0, 8), ("attrchan", 8, 2), ("attr", 10, 6), ("op", 16, 2),
                   ("vdst", 18, 8)))
VOP3P = Format("VOP3P", 8, 0xFC000000, 0xCC000000, ((16, 7),),
               _f(("vdst", 0, 8), ("neg_hi", 8, 3), ("op_sel", 11, 3), ("op_sel_hi2", 14, 1),
                  ("clamp", 15, 1), ("op", 16, 7), ("unused", 23, 3),
                  ("src0", D1 + 0, 9), ("src1", D1 + 9, 9), ("src2", D1 + 18, 9),
                  ("op_sel_hi", D1 + 27, 2), ("neg", D1 + 29, 3)))
VOP3 = Format("VOP3", 8, 0xFC000000, 0xD4000000, ((16, 10),),
              _f(("vdst", 0, 8), ("abs", 8, 3), ("op_sel", 11, 4), ("clamp", 15, 1),
                 ("op", 16, 10),
                 ("src0", D1 + 0, 9), ("src1", D1 + 9, 9), ("src2", D1 + 18, 9),
                 ("omod", D1 + 27, 2), ("neg", D1 + 29, 3),
                 # VOP3b (carry-out forms) overlay: sdst instead of abs/op_sel
                 ("sdst", 8, 7)))
DS = Format("DS", 8, 0xFC000000, 0xD8000000, ((18, 8),),
            _f(("offset0", 0, 8), ("offset1", 8, 8), ("gds", 17, 1), ("op", 18, 8),
               ("addr", D1 + 0, 8), ("data0", D1 + 8, 8), ("data1", D1 + 16, 8),
               ("vdst", D1 + 24, 8)))
FLAT = Format("FLAT", 8, 0xFC000000, 0xDC000000, ((18, 7),),
              _f(("offset", 0, 12), ("dlc", 12, 1), ("lds", 13, 1), ("seg", 14, 2),
                 ("glc", 16, 1), ("slc", 17, 1), ("op", 18, 7),
                 ("addr", D1 + 0, 8), ("data", D1 + 8, 8), ("saddr", D1 + 16, 7),
                 ("nv", D1 + 23, 1), ("vdst", D1 + 24, 8)))
MUBUF = Format("MUBUF", 8, 0xFC000000, 0xE0000000, ((18, 7), (25, 1)),
               _f(("offset", 0, 12), ("offen", 12, 1), ("idxen", 13, 1), ("glc", 14, 1),
                  ("dlc", 15, 1), ("lds", 16, 1), ("op", 18, 7), ("op7", 25, 1),
                  ("vaddr", D1 + 0, 8), ("vdata", D1 + 8, 8), ("srsrc", D1 + 16, 5),
                  ("slc", D1 + 22, 1), ("tfe", D1 + 23, 1), ("soffset", D1 + 24, 8)))
MTBUF = Format("MTBUF", 8, 0xFC000000, 0xE8000000, ((16, 3), (D1 + 21, 1)),
               _f(("offset", 0, 12), ("offen", 12, 1), ("idxen", 13, 1), ("glc", 14, 1),
                  ("dlc", 15, 1), ("op", 16, 3), ("format", 19, 7),
                  ("vaddr", D1 + 0, 8), ("vdata", D1 + 8, 8), ("srsrc", D1 + 16, 5),
                  ("op3", D1 + 21, 1), ("slc", D1 + 22, 1), ("tfe", D1 + 23, 1),
                  ("soffset", D1 + 24, 8)))
MIMG = Format("MIMG", 8, 0xFC000000, 0xF0000000, ((18, 7), (0, 1)),
              _f(("opm", 0, 1), ("nsa", 1, 2), ("dim", 3, 3), ("dlc", 7, 1), ("dmask", 8, 4),
                 ("unorm", 12, 1), ("glc", 13, 1), ("r128", 15, 1), ("tfe", 16, 1),
                 ("lwe", 17, 1), ("op", 18, 7), ("slc", 25, 1),
                 ("vaddr", D1 + 0, 8), ("vdata", D1 + 8, 8), ("srsrc", D1 + 16, 5),
                 ("ssamp", D1 + 21, 5), ("a16", D1 + 30, 1), ("d16", D1 + 31, 1)))
SMEM = Format("SMEM", 8, 0xFC000000, 0xF4000000, ((18, 8),),
              _f(("sbase", 0, 6), ("sdata", 6, 7), ("dlc", 14, 1), ("glc", 16, 1),
                 ("op", 18, 8), ("offset", D1 + 0, 21), ("soffset", D1 + 25, 7)))
EXP = Format("EXP", 8, 0xFC000000, 0xF8000000, (),
             _f(("en", 0, 4), ("target", 4, 6), ("compr", 10, 1), ("done", 11, 1),
                ("vm", 12, 1), ("vsrc0", D1 + 0, 8), ("vsrc1", D1 + 8, 8),
                ("vsrc2", D1 + 16, 8), ("vsrc3", D1 + 24, 8)))

def _with_reserved(fmt: Format) -> Format:
    """Add ``rsvdN`` fields for bits no field covers, so that field values
    always re-encode to the exact original bytes."""
    covered = fmt.match_mask
    for lo, w in fmt.opcode_bits:
        covered |= ((1 << w) - 1) << lo
    extra = _reserved(fmt.fields, covered, fmt.size * 8)
    if not extra:
        return fmt
    return Format(fmt.name, fmt.size, fmt.match_mask, fmt.match_value, fmt.opcode_bits,
                  fmt.fields + extra)


def _reserved(fields: tuple[Field, ...], covered: int, total: int) -> tuple[Field, ...]:
    """``rsvdN`` fields for the bits of a ``total``-bit word that neither
    ``fields`` nor the mask ``covered`` cover."""
    for f in fields:
        covered |= f.mask << f.lo
    extra = []
    bit = 0
    while bit < total:
        if not covered >> bit & 1:
            start = bit
            while bit < total and not covered >> bit & 1:
                bit += 1
            extra.append(Field(f"rsvd{start}", start, bit - start))
        else:
            bit += 1
    return tuple(extra)


SOP1, SOPC, SOPP, SOPK, SOP2, VOPC, VOP1, VOP2, VINTRP, VOP3P, VOP3, DS, FLAT, MUBUF, MTBUF, \
    MIMG, SMEM, EXP = (_with_reserved(f) for f in (
        SOP1, SOPC, SOPP, SOPK, SOP2, VOPC, VOP1, VOP2, VINTRP, VOP3P, VOP3, DS, FLAT, MUBUF,
        MTBUF, MIMG, SMEM, EXP))

#: Formats in the order their match tests must be tried.
FORMAT_ORDER: tuple[Format, ...] = (
    SOP1, SOPC, SOPP, SOPK, SOP2, VOPC, VOP1, VOP2, VINTRP, VOP3P, VOP3, DS,
    FLAT, MUBUF, MTBUF, MIMG, SMEM, EXP,
)
FORMATS: dict[str, Format] = {f.name: f for f in FORMAT_ORDER}

# ---- extra dwords --------------------------------------------------------
SDWA = _f(("src0", 0, 8), ("dst_sel", 8, 3), ("dst_unused", 11, 2), ("clamp", 13, 1),
          ("omod", 14, 2), ("src0_sel", 16, 3), ("src0_sext", 19, 1), ("src0_neg", 20, 1),
          ("src0_abs", 21, 1), ("s0", 23, 1), ("src1_sel", 24, 3), ("src1_sext", 27, 1),
          ("src1_neg", 28, 1), ("src1_abs", 29, 1), ("s1", 31, 1))
#: SDWA dword of VOPC: sdst (with its enable bit ``sd``) replaces dst_sel..omod.
SDWA_VOPC = _f(("src0", 0, 8), ("sdst", 8, 7), ("sd", 15, 1), ("src0_sel", 16, 3),
               ("src0_sext", 19, 1), ("src0_neg", 20, 1), ("src0_abs", 21, 1), ("s0", 23, 1),
               ("src1_sel", 24, 3), ("src1_sext", 27, 1), ("src1_neg", 28, 1),
               ("src1_abs", 29, 1), ("s1", 31, 1))
DPP16 = _f(("src0", 0, 8), ("dpp_ctrl", 8, 9), ("fi", 18, 1), ("bound_ctrl", 19, 1),
           ("src0_neg", 20, 1), ("src0_abs", 21, 1), ("src1_neg", 22, 1), ("src1_abs", 23, 1),
           ("bank_mask", 24, 4), ("row_mask", 28, 4))
DPP8 = _f(("src0", 0, 8), ("sel", 8, 24))
NSA = _f(("addr1", 0, 8), ("addr2", 8, 8), ("addr3", 16, 8), ("addr4", 24, 8))

SDWA, SDWA_VOPC, DPP16 = (f + _reserved(f, 0, 32) for f in (SDWA, SDWA_VOPC, DPP16))

EXTRA_FORMATS: dict[str, tuple[Field, ...]] = {
    "SDWA": SDWA, "SDWA_VOPC": SDWA_VOPC, "DPP16": DPP16, "DPP8": DPP8, "NSA": NSA,
}


def extra_format(fmt: Format, kind: str) -> str:
    """Name (in :data:`EXTRA_FORMATS`) of the SDWA/DPP dword layout."""
    if kind == "sdwa":
        return "SDWA_VOPC" if fmt is VOPC else "SDWA"
    return "DPP16" if kind == "dpp16" else "DPP8"


#: Values of a 9-bit VOP1/VOP2/VOPC src0 that announce an extra dword.
SRC_SDWA = 0xF9
SRC_DPP16 = 0xFA
SRC_DPP8 = 0xE9
SRC_DPP8_FI = 0xEA
SRC_LITERAL = 0xFF

#: VOP3 opcode bases of the VOP1/VOP2/VOPC instructions' 64-bit forms.
VOP3_FROM_VOPC = 0x000
VOP3_FROM_VOP2 = 0x100
VOP3_FROM_VOP1 = 0x180


def classify(word: int) -> Format | None:
    """The format of an encoding whose first dword is ``word`` (None: no format)."""
    for fmt in FORMAT_ORDER:
        if word & fmt.match_mask == fmt.match_value:
            return fmt
    return None
