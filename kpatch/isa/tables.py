"""Per-target opcode tables (generated data, see tools/gen_isa_tables.py).

``tables/<target>.json`` holds, per format and opcode, the mnemonic and an
operand template learned from llvm-objdump-16: the operands in printed
order, each one of

* ``["f", field, kind, width(, type(, spelling))]`` - a field of the
  encoding; kind ``v`` (VGPR index), ``s`` (scalar register), ``src``
  (9-bit VOP source), ``ss`` (8-bit scalar source), ``param``
  (interpolation parameter p10/p20/p0), ``attr`` (interpolation attribute
  and channel); width in dwords; type
  of constants; spelling: ``{"sfx": comment LLVM appends to every scalar
  register, "vsfx": ... to every VGPR, "ov": {value: text or null
  (invalid)}}`` where LLVM spells a value otherwise (register-class
  comments, rejected registers);
* ``["lit", type]`` - the instruction's mandatory 32-bit literal;
* ``["imm"]`` - the 16-bit immediate of SOPK;
* ``["t", text]`` - fixed text (implicit operands such as ``vcc_lo``).

``z`` lists fields LLVM requires to be zero for that opcode (otherwise the
word is not a valid instruction); further keys describe modifiers
(``mods``, ``opsel_n``/``opsel_pos``), SDWA/DPP forms, immediate styles,
image operand sizing (``img``, see :class:`ImageFacts`) and SMEM cache bits
LLVM ignores (``ign``).  :func:`load` turns the JSON into :class:`OpInfo`
objects once per target.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from functools import lru_cache

from kpatch.errors import UsageError
from kpatch.isa import formats as F

TARGETS = ("gfx1010", "gfx1030")
_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tables")


@dataclass(frozen=True)
class Operand:
    """One entry of an operand template."""

    tag: str  # "f" field, "lit" literal, "imm" SOPK immediate, "t" fixed text
    field: str | None = None
    kind: str | None = None  # v, s, src, ss
    width: int = 1
    type: str = "b32"
    text: str | None = None
    suffix: str = ""  # appended to scalar registers (LLVM's register-class comment)
    vsuffix: str = ""  # appended to VGPRs (in a scalar-only source)
    overrides: dict | None = dataclasses.field(default=None, compare=False, hash=False)

    @property
    def spelling_key(self) -> tuple:
        """What, besides kind/width/type, decides this operand's text."""
        return (self.suffix, self.vsuffix, tuple(sorted((self.overrides or {}).items())))


@dataclass
class Form:
    """Mnemonic, operand template and zero-required fields of one encoding form.

    ``mods`` (SDWA/DPP forms) maps ``"field=value"`` to ``p`` (printed), ``i``
    (ignored by LLVM) or ``z`` (LLVM rejects the encoding)."""

    mnemonic: str
    operands: tuple[Operand, ...]
    zero: tuple[tuple[str, int], ...] = ()  # (field, value it must have)
    mods: dict = field(default_factory=dict)


@dataclass
class OpInfo:
    """What the tables say about one opcode of one format on one target."""

    fmt: F.Format
    opcode: int
    form: Form
    imm: str | None = None  # SOPP/SOPK immediate style
    imm_zero: bool = False
    vop3b: bool = False
    high: bool = False  # v_interp_*_f16 e64: src0 bit 8 is the "high" flag
    mods: dict = field(default_factory=dict)
    opsel_n: int = 0
    opsel_pos: tuple[int, ...] = ()  # VOP3 op_sel bit -> printed position (-1: not printed)
    mix: bool = False
    sdwa: Form | None = None
    dpp16: Form | None = None
    dpp8: Form | None = None
    base: dict = field(default_factory=dict)
    img: "ImageFacts | None" = None
    ignored: tuple[str, ...] = ()  # flag fields LLVM accepts but does not print (SMEM glc/dlc)

    @property
    def mnemonic(self) -> str:
        return self.form.mnemonic

    @property
    def literal_fields(self) -> tuple[str, ...]:
        """Source fields whose value 255 means a trailing literal."""
        return tuple(o.field for o in self.form.operands
                     if o.tag == "f" and o.kind in ("src", "ss") and o.type != "vreg")

    @property
    def has_mandatory_literal(self) -> bool:
        return any(o.tag == "lit" for o in self.form.operands)


@dataclass(frozen=True)
class ImageFacts:
    """How LLVM sizes the operands of one image (MIMG) opcode.

    LLVM decodes an image instruction with default register widths and then
    looks for the variant matching its fields; when there is none (or a
    register would run past v255) the defaults stay.  ``addr[dim + 8*a16]``
    is the address count for that dim and a16 (None: never converted),
    ``addr_widths``/``data_widths`` the non-NSA address and data register
    widths variants exist for, ``nsa[(extra dwords, a16)]`` how many
    addresses an NSA encoding decodes to (missing: LLVM rejects it) and
    ``nsa_counts`` the shorter NSA address counts variants exist for.
    ``addr_default`` is the address width LLVM decodes a non-NSA encoding
    with (before converting); ``bvh``: image_bvh*_intersect_ray, whose
    widths never change; ``gather``: data is always 4 dwords (gather4)."""

    addr: tuple
    addr_default: int | None = None
    addr_widths: frozenset = frozenset()
    data_widths: frozenset = frozenset()
    nsa: dict = field(default_factory=dict)
    nsa_counts: frozenset = frozenset()
    bvh: bool = False
    gather: bool = False


def _image(d: dict | None) -> ImageFacts | None:
    if d is None:
        return None
    nsa = {}
    for k, v in d.get("nsa", {}).items():
        k1, k2 = k.split(",")
        nsa[(int(k1), int(k2))] = v
    return ImageFacts(tuple(d["a"]), d.get("ad"), frozenset(d.get("av", ())), frozenset(d.get("dv", ())), nsa,
                      frozenset(d.get("nv", ())), bool(d.get("bvh")), bool(d.get("g")))


#: one operand template per distinct table entry (its repr), shared by every
#: form that has it (about 190 distinct among 2,000 forms, 100 distinct
#: operands among 4,100): loading a table is quick
_TEMPLATES: dict[str, tuple[Operand, ...]] = {}
_OPERANDS: dict[str, Operand] = {}


def _template(d: list) -> tuple[Operand, ...]:
    """The (shared, immutable) operand template of a table entry."""
    key = repr(d)
    t = _TEMPLATES.get(key)
    if t is None:
        t = _TEMPLATES[key] = tuple(_OPERANDS.get(k) or _OPERANDS.setdefault(k, _operand(x))
                                    for x, k in zip(d, map(repr, d)))
    return t


def _operand(d: list) -> Operand:
    tag = d[0]
    if tag == "f":
        sp = d[5] if len(d) > 5 else {}
        ov = {int(k): v for k, v in sp.get("ov", {}).items()} or None
        return Operand("f", d[1], d[2], d[3], d[4] if len(d) > 4 else "b32",
                       suffix=sp.get("sfx", ""), vsuffix=sp.get("vsfx", ""), overrides=ov)
    if tag == "lit":
        return Operand("lit", type=d[1] if len(d) > 1 else "hex")
    if tag == "imm":
        return Operand("imm")
    return Operand("t", text=d[1])


def _form(d: dict) -> Form:
    z = d.get("z", {})
    if isinstance(z, list):
        z = {k: 0 for k in z}
    return Form(d["m"], _template(d["o"]), tuple(sorted(z.items())),
                d.get("mods", {}))


@dataclass
class Tables:
    """All opcode tables of one target."""

    target: str
    ops: dict[str, dict[int, OpInfo]]
    names: dict[str, dict[int, str]]
    by_mnemonic: dict[str, OpInfo]

    def get(self, fmt: str, opcode: int) -> OpInfo | None:
        return self.ops.get(fmt, {}).get(opcode)

    def find(self, mnemonic: str) -> OpInfo:
        """The opcode entry printing ``mnemonic`` (e.g. 'v_mov_b32_e32')."""
        try:
            return self.by_mnemonic[mnemonic]
        except KeyError:
            raise UsageError(f"no instruction {mnemonic!r} on {self.target}") from None


def table_for(processor: str | None, *, family: bool = False) -> str | None:
    """The ISA table (one of :data:`TARGETS`) kpatch decodes ``processor``'s
    code with, or None: kpatch cannot decode it.  The one rule, for every
    reader of code: a processor's own table when kpatch has it (what
    ``disasm``, ``diff`` and the relocator use, so that the text is
    llvm-objdump's); with ``family``, the table of its GFX10 family for the
    others too (gfx101x -> gfx1010, gfx103x -> gfx1030: the analysis reads
    every such object as the chip it reasons about)."""
    processor = processor or ""
    if processor in TARGETS:
        return processor
    if family:
        if processor.startswith("gfx101"):
            return "gfx1010"
        if processor.startswith("gfx103"):
            return "gfx1030"
    return None


def check_target(target: str) -> str:
    if target not in TARGETS:
        raise UsageError(f"unsupported target {target!r} (known: {', '.join(TARGETS)})")
    return target


@lru_cache(maxsize=None)
def load(target: str) -> Tables:
    """Load (once) the opcode tables of ``target``."""
    check_target(target)
    with open(os.path.join(_DIR, f"{target}.json")) as fh:
        raw = json.load(fh)
    ops: dict[str, dict[int, OpInfo]] = {}
    by_mn: dict[str, OpInfo] = {}
    for fmtname, tab in raw["formats"].items():
        fmt = F.FORMATS[fmtname]
        d = ops.setdefault(fmtname, {})
        for op_s, e in tab.items():
            op = int(op_s)
            info = OpInfo(
                fmt=fmt, opcode=op, form=_form(e), imm=e.get("imm"),
                imm_zero=bool(e.get("imm_zero")), vop3b=bool(e.get("b")), high=bool(e.get("high")),
                mods=e.get("mods", {}), opsel_n=e.get("opsel_n", 0),
                opsel_pos=tuple(e.get("opsel_pos", ())), mix=bool(e.get("mix")),
                sdwa=_form(e["sdwa"]) if "sdwa" in e else None,
                dpp16=_form(e["dpp16"]) if "dpp16" in e else None,
                dpp8=_form(e["dpp8"]) if "dpp8" in e else None,
                base=e.get("base", {}),
                img=_image(e.get("img")),
                ignored=tuple(e.get("ign", ())),
            )
            d[op] = info
            by_mn.setdefault(info.mnemonic, info)
    names = {k: {int(i): n for i, n in v.items()} for k, v in raw["names"].items()}
    return Tables(target, ops, names, by_mn)


#: Formats whose encodings in LLVM's MC tables keep the implicit registers of
#: their instructions (LLVM attaches them to pseudo-instructions; the encoded
#: ``_gfx10`` forms of scalar and memory instructions lose them).
IMPLICIT_FORMATS = frozenset({"VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "VINTRP"})


@lru_cache(maxsize=None)
def implicit_uses(target: str) -> dict[tuple[str, int], frozenset[str]]:
    """(format, opcode) -> registers LLVM's instruction info says the
    instruction reads implicitly (``m0``, ``exec``, ``vcc``, ``mode``...), for
    :data:`IMPLICIT_FORMATS` (``tables/implicit.json``, generated by
    ``tools/gen_isa_tables.py --implicit``)."""
    with open(os.path.join(_DIR, "implicit.json")) as fh:
        data = json.load(fh)["targets"][check_target(target)]
    return {(f, int(op)): frozenset(e["uses"]) for f, ops in data.items() if f in IMPLICIT_FORMATS
            for op, e in ops.items()}
