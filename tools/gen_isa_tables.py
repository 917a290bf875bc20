#!/usr/bin/env python3
"""Generate kpatch/isa/tables/<target>.json by probing llvm-objdump-16.

For every format and every opcode value the generator builds encodings,
has LLVM disassemble them (thousands per llvm-objdump run, see
tools/isa_probe.py) and learns from the text:

* the mnemonic, per encoding form (e32/e64/SDWA/DPP...);
* which fields are operands, their order in the text and register widths,
  found *differentially*: starting from a base encoding (operand fields 0)
  one field at a time is set to a distinctive register and the operand that
  changed is located;
* which fields LLVM requires to be zero (the encoding becomes invalid when
  they are set) - the decoder must then print the word as unknown, like LLVM;
* source operand types (how inline constants and literals are spelled);
* VOP3/VOP3P modifier support, and immediate spellings of SOPP/SOPK.

The output is plain data; kpatch reads it at run time and never needs LLVM.
Run: python3 tools/gen_isa_tables.py [--target gfx1010|gfx1030] (takes a few
minutes; both targets run in parallel).

``--implicit`` (run after the tables exist) writes ``tables/implicit.json``:
the registers each opcode of each table uses and defines *implicitly*, from
LLVM's TableGen'd instruction info itself.  tools/llvm_implicit_regs.cpp,
built against libLLVM-16 (package llvm-16-dev), prints every LLVM opcode's
``MCInstrDesc`` implicit uses/defs; ``llvm-mc-16 --disassemble --show-inst``
names the LLVM opcode of one encoding of each table entry; the two are
joined by that name.  Only the vector ALU formats are written: LLVM keeps
implicit registers on its pseudo instructions, and the encodings
(``..._gfx10`` "reals") copy them for VALU instructions but not for scalar
or memory ones (``S_ADD_U32_gfx10`` has no SCC def, ``S_ADD_U32`` has), so
for those formats the join would claim "nothing implicit" wrongly.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from isa_probe import assemble_ok, probe  # noqa: E402
from kpatch.isa import formats as F  # noqa: E402
from kpatch.isa import operands as O  # noqa: E402
from kpatch.isa import special as SP  # noqa: E402

TARGETS = ("gfx1010", "gfx1030")
OUT_DIR = os.path.join(os.path.dirname(HERE), "kpatch", "isa", "tables")

HWREG_RE = re.compile(r"hwreg\([^)]*\)")
REG_RE = re.compile(r"^(v|s|ttmp)(?:(\d+)|\[(\d+):(\d+)\])$")


def parse_reg(tok: str):
    """'v[4:5]' -> ('v', 4, 2); 's7' -> ('s', 7, 1); else None."""
    m = REG_RE.match(tok)
    if not m:
        return None
    if m.group(2) is not None:
        return m.group(1), int(m.group(2)), 1
    lo, hi = int(m.group(3)), int(m.group(4))
    return m.group(1), lo, hi - lo + 1


def strip_comment(tok: str) -> str:
    """Drop a trailing /*...*/ comment LLVM adds to odd operands."""
    i = tok.find("/*")
    return tok if i < 0 else tok[:i]


def split_text(text: str):
    """Mnemonic and comma-separated operand list of an instruction text.

    Trailing space-separated modifiers of the last operand are returned
    separately: 'buffer_load_dword v1, v2, s[0:3], 0 offen' ->
    ('buffer_load_dword', ['v1', 'v2', 's[0:3]', '0'], ['offen']).
    """
    text = HWREG_RE.sub("HWREG", text)
    if " " not in text:
        return text, [], []
    mn, rest = text.split(" ", 1)
    parts = rest.split(", ")
    last = parts[-1].split(" ")
    parts[-1] = last[0]
    return mn, parts, last[1:]


class Batch:
    """Probes collected under keys, run in one llvm-objdump pass."""

    def __init__(self):
        self.keys: list = []
        self.blocks: list[bytes] = []

    def add(self, key, data: bytes):
        self.keys.append(key)
        self.blocks.append(data)

    def run(self, target: str) -> dict:
        res = probe(self.blocks, target)
        return dict(zip(self.keys, res))


def enc(fmt: F.Format, op: int, values: dict[str, int], extra: bytes = b"") -> bytes:
    """Bytes of ``fmt`` with opcode ``op`` and the given field values."""
    v = fmt.with_opcode(fmt.match_value, op)
    for name, val in values.items():
        v = fmt.field(name).put(v, val)
    return v.to_bytes(fmt.size, "little") + extra


def xenc(fields: tuple, values: dict[str, int]) -> bytes:
    v = 0
    for f in fields:
        if f.name in values:
            v = f.put(v, values[f.name])
    return v.to_bytes(4, "little")


# ---------------------------------------------------------------------------
# per format: register-like operand fields and how a probe value reads
# kind: 'v' VGPR field, 's' scalar register field (value * scale is the SGPR),
# 'src' 9-bit VOP source, 'ss' 8-bit scalar source.
REGFIELDS = {
    "SOP1": {"sdst": ("s", 1), "ssrc0": ("ss", 1)},
    "SOP2": {"sdst": ("s", 1), "ssrc0": ("ss", 1), "ssrc1": ("ss", 1)},
    "SOPC": {"ssrc0": ("ss", 1), "ssrc1": ("ss", 1)},
    "SOPK": {"sdst": ("s", 1)},
    "SOPP": {},
    "SMEM": {"sdata": ("s", 1), "sbase": ("s", 2), "soffset": ("s", 1)},
    "VOP1": {"vdst": ("v", 1), "src0": ("src", 1)},
    "VOP2": {"vdst": ("v", 1), "vsrc1": ("v", 1), "src0": ("src", 1)},
    "VOPC": {"vsrc1": ("v", 1), "src0": ("src", 1)},
    "VOP3": {"vdst": ("v", 1), "src0": ("src", 1), "src1": ("src", 1), "src2": ("src", 1)},
    "VOP3P": {"vdst": ("v", 1), "src0": ("src", 1), "src1": ("src", 1), "src2": ("src", 1)},
    "VINTRP": {"vdst": ("v", 1), "vsrc": ("v", 1)},
    "DS": {"addr": ("v", 1), "data0": ("v", 1), "data1": ("v", 1), "vdst": ("v", 1)},
    "FLAT": {"addr": ("v", 1), "data": ("v", 1), "vdst": ("v", 1), "saddr": ("s", 1)},
    "MUBUF": {"vaddr": ("v", 1), "vdata": ("v", 1), "srsrc": ("s", 4), "soffset": ("ss", 1)},
    "MTBUF": {"vaddr": ("v", 1), "vdata": ("v", 1), "srsrc": ("s", 4), "soffset": ("ss", 1)},
    "MIMG": {"vaddr": ("v", 1), "vdata": ("v", 1), "srsrc": ("s", 4), "ssamp": ("s", 4)},
    "EXP": {"vsrc0": ("v", 1), "vsrc1": ("v", 1), "vsrc2": ("v", 1), "vsrc3": ("v", 1)},
}
#: Distinct values given to register fields in probes (multiples of 4 so that
#: aligned SGPR tuples print at the value itself).
DISTINCT = (20, 28, 36, 44, 52, 60, 12)


def reg_value(kind: str, scale: int, n: int) -> int:
    """Field value that makes register number ``n`` appear in the text."""
    if kind == "src":
        return 256 + n
    return n // scale


def reg_of(kind: str, scale: int, value: int) -> int:
    """Register number a field value names, for matching parsed tokens."""
    if kind == "src":
        return value - 256 if value >= 256 else value
    return value * scale


# Base field values (besides opcode) tried in order; the first that LLVM
# accepts without an "invalid register" comment is used.
V0 = 256
BASES = {
    "SMEM": [{"soffset": 0x7D}],
    "FLAT": [{"saddr": 0x7D}, {"saddr": 0x7D, "glc": 1}],
    "MUBUF": [{"soffset": 0x80}, {"soffset": 0x80, "glc": 1}],
    "MTBUF": [{"soffset": 0x80, "format": 1}],
    # the last: image_bvh*_intersect_ray, which insist on dmask 0xf, unorm, r128
    "MIMG": [{"dmask": 1}, {"dmask": 0xF}, {"dmask": 1, "dim": 1},
             {"dmask": 0xF, "unorm": 1, "r128": 1}],
    "EXP": [{"en": 0xF}],
    "VOP1": [{}, {"src0": V0}],
    "VOP2": [{}, {"src0": V0}],
    "VOPC": [{}, {"src0": V0}],
    "VOP3": [{}, {"src0": V0}, {"src1": V0}, {"src0": V0, "src1": V0},
             {"src0": V0, "src1": V0, "src2": V0}, {"src2": V0}],
    "VOP3P": [{"op_sel_hi": 3, "op_sel_hi2": 1}, {"op_sel_hi": 3, "op_sel_hi2": 1, "src0": V0,
                                                   "src1": V0, "src2": V0}],
}
LIT = 0x12345678  # literal dword appended to every probe


#: fields whose per-opcode validity is learned elsewhere (modifiers) or that
#: are part of the opcode / operand registers
NOT_FLAGS = {"op", "op7", "op3", "opm", "seg", "abs", "neg", "op_sel", "clamp", "omod",
             "neg_hi", "op_sel_hi", "op_sel_hi2", "sdst", "simm16"}


def flag_fields(fmt: F.Format, regs: dict):
    """Non-register fields whose nonzero values may make an opcode invalid."""
    for fld in fmt.fields:
        if fld.name in regs or fld.name in NOT_FLAGS:
            continue
        if fmt.name in ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "SOP1", "SOP2", "SOPC",
                        "SOPK", "SOPP") and not fld.name.startswith(("rsvd", "unused")):
            continue
        yield fld


def flag_values(fld: F.Field, base: dict) -> list[int]:
    b = base.get(fld.name, 0)
    vals = [v for v in {1, fld.mask} if v != b]
    return vals or [0]


def opcode_space(fmt: F.Format):
    """Opcodes to probe, skipping values that fall into another format."""
    for op in range(fmt.opcode_count):
        w = int.from_bytes(enc(fmt, op, {})[:4], "little")
        if F.classify(w) is fmt:
            yield op


def clean(text: str) -> str:
    """Drop LLVM's /*...*/ comments, and the target word of ``exp`` (which
    the printer spells from the target field) so that operands split cleanly."""
    text = re.sub(r"/\*.*?\*/", "", text)
    if text.startswith("exp "):
        text = "exp " + text.split(" ", 2)[2]
    return text


# ---------------------------------------------------------------------------
def learn_layout(base_text: str, field_texts: dict, regfields: dict):
    """Operand template from a base text and texts with one field changed.

    Returns (mnemonic, template, zero_fields, modifiers) where template is a
    list of operand descriptors in printed order: ["f", field, kind, width],
    ["lit"] (the instruction's mandatory literal) or ["t", fixed_text].
    """
    mn, toks, mods = split_text(clean(base_text))
    tmpl: list = [["t", t] for t in toks]
    for i, t in enumerate(toks):
        if t == "0x%x" % LIT:
            tmpl[i] = ["lit"]
    zero = []
    for fname, (txt, val) in field_texts.items():
        if txt is None:
            zero.append(fname)
            continue
        if txt == base_text:
            continue
        _, toks2, _ = split_text(clean(txt))
        kind, scale = regfields[fname]
        want = reg_of(kind, scale, val)
        for i, t in enumerate(toks2):
            r = parse_reg(t)
            if r and r[1] == want and i < len(tmpl) and toks[i] != t:
                k = kind if kind in ("src", "ss") else r[0]
                tmpl[i] = ["f", fname, k, r[2]]
                break
            if PARAM_RE.match(t) and i < len(tmpl) and toks[i] != t and PARAM_RE.match(toks[i]):
                tmpl[i] = ["f", fname, "param", 1]  # interpolation parameter p10/p20/p0
                break
    return mn, tmpl, zero, mods


PARAM_RE = re.compile(r"^(p10|p20|p0|invalid_param_\d+)$")
ATTR_RE = re.compile(r"^attr\d+\.[xyzw]$")


def base_candidates(fmtname: str, seg):
    for base in BASES.get(fmtname, [{}]):
        base = dict(base)
        if seg is not None:
            base["seg"] = seg
        yield base


def keys_of(fmtname: str):
    fmt = F.FORMATS[fmtname]
    segs = (0, 1, 2) if fmtname == "FLAT" else (None,)
    for op in opcode_space(fmt):
        for seg in segs:
            yield fmt, op, seg


def round1(target: str) -> dict:
    """For each format/opcode: a valid base encoding and the operand layout."""
    b = Batch()
    regs_all = dict(REGFIELDS)
    regs_all["VOP3"] = dict(REGFIELDS["VOP3"], sdst=("s", 1))
    lit = LIT.to_bytes(4, "little")
    for fmtname, regs in regs_all.items():
        for fmt, op, seg in keys_of(fmtname):
            for bi, base in enumerate(base_candidates(fmtname, seg)):
                b.add((fmtname, op, seg, bi, None), enc(fmt, op, base, lit))
                for fname, (kind, scale) in regs.items():
                    vals = dict(base)
                    vals[fname] = reg_value(kind, scale, 20)
                    b.add((fmtname, op, seg, bi, fname), enc(fmt, op, vals, lit))
                for fld in flag_fields(fmt, regs):
                    for j, v in enumerate(flag_values(fld, base)):
                        vals = dict(base)
                        vals[fld.name] = v
                        b.add((fmtname, op, seg, bi, "#" + fld.name, j), enc(fmt, op, vals, lit))
    res = b.run(target)
    out: dict = {}
    for fmtname, regs in regs_all.items():
        table = out.setdefault(fmtname, {})
        for fmt, op, seg in keys_of(fmtname):
            chosen = None
            for bi, base in enumerate(base_candidates(fmtname, seg)):
                r = res[(fmtname, op, seg, bi, None)]
                if r is None:
                    continue
                if chosen is None or "/*" in chosen[1][0]:
                    if chosen is None or "/*" not in r[0]:
                        chosen = (bi, r, base)
            if chosen is None:
                continue
            bi, r, base = chosen
            ftexts = {}
            for fname, (kind, scale) in regs.items():
                rr = res[(fmtname, op, seg, bi, fname)]
                ftexts[fname] = (rr[0] if rr else None, reg_value(kind, scale, 20))
            mn, tmpl, zero, mods = learn_layout(r[0], ftexts, regs)
            if fmtname == "VOP3" and "sdst" in zero:
                zero.remove("sdst")
            high = False
            if fmtname == "VOP3":
                for i, d in enumerate(tmpl):
                    if d[0] == "t" and ATTR_RE.match(d[1]):
                        # v_interp_*_e64: src0 holds attr [5:0], channel [7:6] and
                        # (16-bit forms) the "high" flag in bit 8
                        tmpl[i] = ["f", "src0", "attr", 1]
                        if "src0" in zero:
                            zero.remove("src0")
                        high = "high" in mods
            ignored = []
            for fld in flag_fields(fmt, regs):
                outs = [res[(fmtname, op, seg, bi, "#" + fld.name, j)]
                        for j in range(len(flag_values(fld, base)))]
                if all(o is None for o in outs):
                    zero.append(fld.name)
                elif all(o is not None and o[0] == r[0] for o in outs):
                    ignored.append(fld.name)
            key = op if seg is None else op | (seg << 7)
            table[key] = {"m": mn, "o": tmpl, "z": zero, "base": base,
                          "size": r[1], "text": r[0], "mods": mods}
            if high:
                table[key]["high"] = True
            if fmtname == "SMEM" and ignored:  # cache bits LLVM does not print
                table[key]["ign"] = [n for n in ignored if n in ("glc", "dlc")]
    return out


# ---------------------------------------------------------------------------
TYPE_PROBES = ((248, None), (240, None), (255, 0x3800), (255, 0x3F800000),
               (255, 0x12345678), (255, 0x3E22F983))
TYPES = ("b32", "b64", "f16", "i16", "v2f16", "v2i16")


def classify_type(texts: list) -> str | None:
    """The operand type whose constant spellings match LLVM's texts
    ('reg': LLVM prints '/*invalid immediate*/' for every constant)."""
    if all(t == "" for t in texts[:2]):
        return "reg"
    if texts[0] == "v248" and texts[1] == "v240":
        return "vreg"  # a 9-bit field LLVM reads as a VGPR number (low 8 bits)
    for t in TYPES:
        ok = True
        for (val, lit), txt in zip(TYPE_PROBES, texts):
            if txt is None:
                continue
            exp = O.inline_text(val, t) if val != 255 else O.literal_text(lit, t)
            if exp != txt:
                ok = False
                break
        if ok:
            return t
    return None


def operand_token(text: str, index: int):
    _, toks, _ = split_text(clean(text))
    return toks[index] if index < len(toks) else None


SOPP_VALUES = (0, 5, 64, 65, 0x7FFF, 0x8000, 0xFFF0, 0xFFFF, 0x1234, 0xC07F, 0x3F70, 0xFF9F,
               0x0080, 0xFFE3, 0x0003, 0x0022, 0x0012)
VOP3_MODS = [("abs", 0), ("abs", 1), ("abs", 2), ("neg", 0), ("neg", 1), ("neg", 2),
             ("clamp", 0), ("omod", 0), ("omod", 1), ("op_sel", 0), ("op_sel", 1), ("op_sel", 2),
             ("op_sel", 3)]
VOP3P_MODS = [("neg", 0), ("neg", 1), ("neg", 2), ("neg_hi", 0), ("neg_hi", 1), ("neg_hi", 2),
              ("op_sel", 0), ("op_sel", 1), ("op_sel", 2), ("op_sel_hi", 0), ("op_sel_hi", 1),
              ("op_sel_hi2", 0), ("clamp", 0)]
SDWA_DEFAULT = {"dst_sel": 6, "src0_sel": 6, "src1_sel": 6}


def sdwa_variants(fmtname: str) -> list[dict]:
    """Candidate SDWA dwords (all-DWORD selects), most general first."""
    vs = [dict(SDWA_DEFAULT), {"dst_sel": 6, "src0_sel": 6}, {"src0_sel": 6, "src1_sel": 6},
          {"src0_sel": 6}, {}]
    if fmtname == "VOPC":
        for v in vs:
            v.pop("dst_sel", None)
    return vs


#: SDWA / DPP modifier probes: (field, value)
SDWA_MODS = [("src0_sext", 1), ("src0_neg", 1), ("src0_abs", 1), ("src1_sext", 1), ("src1_neg", 1),
             ("src1_abs", 1), ("clamp", 1), ("omod", 1), ("omod", 2), ("omod", 3), ("s0", 1), ("s1", 1),
             ("dst_unused", 1), ("dst_unused", 2), ("dst_unused", 3), ("dst_sel", 0), ("dst_sel", 5),
             ("dst_sel", 7), ("src0_sel", 0), ("src0_sel", 7), ("src1_sel", 0), ("src1_sel", 7),
             ("sd", 1)]
DPP_MODS = [("src0_neg", 1), ("src0_abs", 1), ("src1_neg", 1), ("src1_abs", 1), ("bound_ctrl", 1),
            ("fi", 1)]


def round2(target: str, r1: dict) -> None:
    """Source types, modifiers, SDWA/DPP forms and immediate styles."""
    b = Batch()
    lit_default = LIT.to_bytes(4, "little")
    for fmtname in ("SOP1", "SOP2", "SOPC", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P"):
        fmt = F.FORMATS[fmtname]
        for op, e in r1.get(fmtname, {}).items():
            for i, d in enumerate(e["o"]):
                if d[0] == "f" and d[2] in ("src", "ss"):
                    for k, (val, lit) in enumerate(TYPE_PROBES):
                        vals = dict(e["base"])
                        vals[d[1]] = val
                        b.add(("T", fmtname, op, i, k),
                              enc(fmt, op, vals, (lit if lit is not None else LIT).to_bytes(4, "little")))
                elif d[0] == "lit":
                    for k, (val, lit) in enumerate(TYPE_PROBES):
                        if lit is not None:
                            b.add(("T", fmtname, op, i, k),
                                  enc(fmt, op, e["base"], lit.to_bytes(4, "little")))
    for op, e in r1.get("VOP3", {}).items():
        fmt = F.VOP3
        for name, bit in VOP3_MODS:
            vals = dict(e["base"])
            vals[name] = vals.get(name, 0) | (1 << bit)
            b.add(("M3", op, name, bit), enc(fmt, op, vals, lit_default))
    for op, e in r1.get("VOP3P", {}).items():
        fmt = F.VOP3P
        for name, bit in VOP3P_MODS:
            vals = dict(e["base"])
            vals[name] = vals.get(name, 0) ^ (1 << bit)
            b.add(("MP", op, name, bit), enc(fmt, op, vals, lit_default))
    # SDWA / DPP forms of VOP1/VOP2/VOPC
    for fmtname in ("VOP1", "VOP2", "VOPC"):
        fmt = F.FORMATS[fmtname]
        xfields = F.SDWA_VOPC if fmtname == "VOPC" else F.SDWA
        for op, e in r1.get(fmtname, {}).items():
            for variant, sd in enumerate(sdwa_variants(fmtname)):
                sd = dict(sd)
                for fname in (None, "vdst", "vsrc1", "src0", "sdst"):
                    base = {k: v for k, v in e["base"].items() if k != "src0"}
                    base["src0"] = F.SRC_SDWA
                    x = dict(sd)
                    if fname in ("vdst", "vsrc1"):
                        if fname not in [f.name for f in fmt.fields]:
                            continue
                        base[fname] = 20
                    elif fname == "src0":
                        x["src0"] = 20
                    elif fname == "sdst":
                        if fmtname != "VOPC":
                            continue
                        x["sdst"] = 20
                        x["sd"] = 1
                    b.add(("SDWA", fmtname, op, variant, fname), enc(fmt, op, base, xenc(xfields, x)))
            for kind, src0, x in (("DPP16", F.SRC_DPP16, {"dpp_ctrl": 0xE4, "row_mask": 0xF, "bank_mask": 0xF}),
                                  ("DPP8", F.SRC_DPP8, {"sel": 0xFAC688})):
                xf = F.DPP16 if kind == "DPP16" else F.DPP8
                for fname in (None, "vdst", "vsrc1", "src0"):
                    base = {k: v for k, v in e["base"].items() if k != "src0"}
                    base["src0"] = src0
                    xx = dict(x)
                    if fname in ("vdst", "vsrc1"):
                        if fname not in [f.name for f in fmt.fields]:
                            continue
                        base[fname] = 20
                    elif fname == "src0":
                        xx["src0"] = 20
                    b.add((kind, fmtname, op, fname), enc(fmt, op, base, xenc(xf, xx)))
    for fmtname in ("SOPP", "SOPK"):
        fmt = F.FORMATS[fmtname]
        for op, e in r1.get(fmtname, {}).items():
            for v in SOPP_VALUES:
                vals = dict(e["base"])
                vals["simm16"] = v
                b.add(("IMM", fmtname, op, v), enc(fmt, op, vals, lit_default))
    # names: hwreg ids, sendmsg codes
    getreg = next((op for op, e in r1["SOPK"].items() if e["m"] == "s_getreg_b32"), None)
    for hid in range(64):
        b.add(("HW", hid), enc(F.SOPK, getreg, {"simm16": hid | (31 << 11)}))
    sendmsg = next((op for op, e in r1["SOPP"].items() if e["m"] == "s_sendmsg"), None)
    for code in range(1024):
        b.add(("MSG", code), enc(F.SOPP, sendmsg, {"simm16": code}))
    res = b.run(target)

    # --- interpret
    for fmtname in ("SOP1", "SOP2", "SOPC", "VOP1", "VOP2", "VOPC", "VOP3", "VOP3P"):
        for op, e in r1.get(fmtname, {}).items():
            for i, d in enumerate(e["o"]):
                if (d[0] == "f" and d[2] in ("src", "ss")) or d[0] == "lit":
                    texts = []
                    for k, (val, lit) in enumerate(TYPE_PROBES):
                        r = res.get(("T", fmtname, op, i, k))
                        texts.append(operand_token(r[0], i) if r else None)
                    t = classify_type(texts)
                    d.append(t or "b32")
                    if t is None:
                        print(f"{target}: {fmtname} {e['m']} operand {i}: unknown type {texts}",
                              file=sys.stderr)
    for op, e in r1.get("VOP3", {}).items():
        mods = {}
        for name, bit in VOP3_MODS:
            r = res[("M3", op, name, bit)]
            st = "z" if r is None else ("i" if r[0] == e["text"] else "p")
            if st == "p" and name == "neg" and "sext(" in r[0]:
                st = "s"  # integer input modifier: LLVM prints the bit as sext()
            mods.setdefault(name, []).append(st)
            if st == "p" and name == "op_sel":
                m = re.search(r"op_sel:\[([0-9,]+)\]", r[0])
                if m:
                    e["opsel_n"] = m.group(1).count(",") + 1
                    e.setdefault("opsel_pos", [-1] * 4)[bit] = m.group(1).split(",").index("1")
        e["vop3mods"] = {k: "".join(v) for k, v in mods.items()}
    for op, e in r1.get("VOP3P", {}).items():
        mods = {}
        e["mix"] = "op_sel_hi" in e["text"]
        for name, bit in VOP3P_MODS:
            r = res[("MP", op, name, bit)]
            st = "z" if r is None else ("i" if r[0] == e["text"] else "p")
            mods.setdefault(name, []).append(st)
            if r is not None and st == "p":
                e.setdefault("modtexts", {})[f"{name}{bit}"] = r[0]
        e["vop3pmods"] = {k: "".join(v) for k, v in mods.items()}
    for fmtname in ("VOP1", "VOP2", "VOPC"):
        regs = {"vdst": ("v", 1), "vsrc1": ("v", 1), "src0": ("v", 1), "sdst": ("s", 1)}
        for op, e in r1.get(fmtname, {}).items():
            for variant in range(5):
                r = res.get(("SDWA", fmtname, op, variant, None))
                if r is None or "/*" in r[0]:
                    continue
                ft = {}
                for fname in ("vdst", "vsrc1", "src0", "sdst"):
                    k = ("SDWA", fmtname, op, variant, fname)
                    if k in res:
                        rr = res[k]
                        ft[fname] = (rr[0] if rr else None, 20)
                mn, tmpl, zero, mods = learn_layout(r[0], ft, regs)
                if not mn.endswith("_sdwa"):
                    break
                e["sdwa"] = {"m": mn, "o": tmpl, "z": zero, "text": r[0], "variant": variant,
                             "xbase": sdwa_variants(fmtname)[variant]}
                break
            for kind in ("DPP16", "DPP8"):
                r = res.get((kind, fmtname, op, None))
                if r is None or "/*" in r[0]:
                    continue
                ft = {}
                for fname in ("vdst", "vsrc1", "src0"):
                    k = (kind, fmtname, op, fname)
                    if k in res:
                        rr = res[k]
                        ft[fname] = (rr[0] if rr else None, 20)
                mn, tmpl, zero, mods = learn_layout(r[0], ft, regs)
                if not mn.endswith("_dpp"):
                    # v_nop takes a DPP8 dword too (printed "v_nop dpp8:[...]")
                    if kind == "DPP8" and tmpl and all(t[0] == "t" and t[1].startswith("dpp8:")
                                                       for t in tmpl):
                        tmpl = []
                    else:
                        continue
                e[kind.lower()] = {"m": mn, "o": tmpl, "z": zero, "text": r[0]}
    for fmtname in ("SOPP", "SOPK"):
        for op, e in r1.get(fmtname, {}).items():
            seen = {}
            for v in SOPP_VALUES:
                r = res[("IMM", fmtname, op, v)]
                seen[v] = None if r is None else r[0]
            e["imm_probe"] = seen
    hw = {}
    for hid in range(64):
        r = res[("HW", hid)]
        if r:
            m = re.search(r"hwreg\(([A-Z_0-9]+)\)", r[0])
            if m and not m.group(1).isdigit():
                hw[hid] = m.group(1)
    msg = {}
    for code in range(1024):
        r = res[("MSG", code)]
        if r:
            t = r[0].split(" ", 1)[1] if " " in r[0] else ""
            if t != str(code):
                msg[code] = t
    r1["_names"] = {"hwreg": hw, "sendmsg": msg}


def round3(target: str, r1: dict) -> None:
    """SDWA/DPP modifier support per opcode, dpp_ctrl and MTBUF format names."""
    b = Batch()
    for fmtname in ("VOP1", "VOP2", "VOPC"):
        fmt = F.FORMATS[fmtname]
        xf_sdwa = F.SDWA_VOPC if fmtname == "VOPC" else F.SDWA
        for op, e in r1.get(fmtname, {}).items():
            base = {k: v for k, v in e["base"].items() if k != "src0"}
            if "sdwa" in e:
                xb = e["sdwa"]["xbase"]
                for name, val in SDWA_MODS:
                    if name not in [f.name for f in xf_sdwa]:
                        continue
                    x = dict(xb)
                    x[name] = val
                    b.add(("XS", fmtname, op, name, val), enc(fmt, op, dict(base, src0=F.SRC_SDWA), xenc(xf_sdwa, x)))
            if "dpp16" in e:
                xb = {"dpp_ctrl": 0xE4, "row_mask": 0xF, "bank_mask": 0xF}
                for name, val in DPP_MODS:
                    x = dict(xb)
                    x[name] = val
                    b.add(("XD", fmtname, op, name, val), enc(fmt, op, dict(base, src0=F.SRC_DPP16), xenc(F.DPP16, x)))
    # dpp_ctrl spellings, on v_mov_b32 (VOP1 op 1)
    for c in range(512):
        x = {"dpp_ctrl": c, "row_mask": 0xF, "bank_mask": 0xF}
        b.add(("CTRL", c), enc(F.VOP1, 1, {"vdst": 1, "src0": F.SRC_DPP16}, xenc(F.DPP16, x)))
    for t in range(64):
        b.add(("EXPT", t), enc(F.EXP, 0, {"en": 0xF, "target": t}))
    tload = next((op for op, e in r1["MTBUF"].items() if e["m"] == "tbuffer_load_format_x"), None)
    for fm in range(128):
        b.add(("FMT", fm), enc(F.MTBUF, tload, {"soffset": 0x80, "format": fm}))
    res = b.run(target)
    for fmtname in ("VOP1", "VOP2", "VOPC"):
        for op, e in r1.get(fmtname, {}).items():
            for kind, mods, tag in (("sdwa", SDWA_MODS, "XS"), ("dpp16", DPP_MODS, "XD")):
                if kind not in e:
                    continue
                st = {}
                for name, val in mods:
                    k = (tag, fmtname, op, name, val)
                    if k not in res:
                        continue
                    r = res[k]
                    st[f"{name}={val}"] = "z" if r is None else ("i" if r[0] == e[kind]["text"] else "p")
                    if r is not None and name.endswith("_neg") and "sext(" in r[0]:
                        st[f"{name}={val}"] = "s"  # an integer operand: LLVM prints sext()
                e[kind]["mods"] = st
    ctrl = {}
    for c in range(512):
        r = res[("CTRL", c)]
        if r:
            m = re.match(r"v_mov_b32_dpp v1, v0 (.*) row_mask:0xf bank_mask:0xf$", r[0])
            ctrl[c] = m.group(1) if m else None
        else:
            ctrl[c] = None
    fmts = {}
    for fm in range(128):
        r = res[("FMT", fm)]
        if r:
            m = re.search(r" format:(\S+)", r[0])
            fmts[fm] = m.group(1) if m else None
    r1["_names"]["exp_target"] = {t: res[("EXPT", t)][0].split(" ")[1]
                                  for t in range(64) if res[("EXPT", t)]}
    r1["_names"]["dpp_ctrl"] = ctrl
    r1["_names"]["mtbuf_format"] = fmts


# ---------------------------------------------------------------------------
MIMG_DIMS = ("1D", "2D", "3D", "CUBE", "1D_ARRAY", "2D_ARRAY", "2D_MSAA", "2D_MSAA_ARRAY")
MAX_ADDR = 13  # most addresses a GFX10 image instruction can take (NSA: 1 + 3 * 4)
NSA_REGS = bytes(range(40, 52))  # address VGPRs v40.. in the NSA dwords


def _operand_index(e: dict, fname: str) -> int | None:
    return next((i for i, d in enumerate(e["o"]) if d[0] == "f" and d[1] == fname), None)


def _width(e: dict, fname: str) -> int:
    i = _operand_index(e, fname)
    return e["o"][i][3] if i is not None else 1


def _printed_width(text: str, index: int) -> int | None:
    """Register count of operand ``index`` (an NSA list counts its entries)."""
    _, toks, _ = split_text(clean(text))
    if index >= len(toks):
        return None
    t = toks[index]
    if t.startswith("["):
        return None
    r = parse_reg(t)
    return r[2] if r else None


def _nsa_count(text: str) -> int | None:
    m = re.search(r"\[(v\d+(?:, v\d+)*)\]", text)
    return m.group(1).count(",") + 1 if m else None


def _mimg_asm_lines(e: dict, dm: int, dims=range(8)):
    """(dim, a16, n, line): the instruction written with n addresses (NSA
    syntax), for the assembler's address-size check."""
    mn, toks, _ = split_text(clean(e["text"]))
    vdi, vai = _operand_index(e, "vdata"), _operand_index(e, "vaddr")
    for dim in dims:
        for a16 in (0, 1):
            for n in range(1, MAX_ADDR + 1):
                addr = "v10" if n == 1 else "[" + ", ".join(f"v{10 + i}" for i in range(n)) + "]"
                ops = [addr if i == vai else t for i, t in enumerate(toks)]
                line = (f"{mn} {', '.join(ops)} dmask:{dm:#x} dim:SQ_RSRC_IMG_{MIMG_DIMS[dim]}"
                        + (" a16" if a16 else ""))
                yield dim, a16, n, line


def _other_data(ddef: int, zero) -> dict:
    """Fields giving a data size other than the default ``ddef`` (to see
    whether LLVM has a variant for it)."""
    if ddef == 1:
        return {"dmask": 3}
    if ddef == 2:
        return {"dmask": 0xF}
    return {"dmask": 0xF, "tfe": 1} if "tfe" not in zero else {"dmask": 0xF, "d16": 1}


def round4(target: str, r1: dict) -> None:
    """Image instructions: how many addresses each (dim, a16) takes, which
    data / address register widths LLVM's variants exist for, how many
    addresses the NSA encodings with 1-3 extra dwords decode to, and the
    fixed address counts of the BVH instructions."""
    tab = r1.get("MIMG", {})
    normal = {op: e for op, e in tab.items() if "r128" not in e["base"]}
    # (a) address counts: the one NSA address list llvm-mc accepts per dim/a16
    dm_of = {}
    lines, keys = [], []
    for op, e in normal.items():
        for dm in (1, 3, 0xF):
            for dim, a16, n, line in _mimg_asm_lines(e, dm, dims=(0, 6)):
                keys.append((op, dm))
                lines.append(line)
    for (op, dm), ok in zip(keys, assemble_ok(lines, target)):
        if ok:
            dm_of.setdefault(op, dm)
    lines, keys = [], []
    for op, e in normal.items():
        if op not in dm_of:
            print(f"{target}: MIMG {e['m']}: no dmask assembles", file=sys.stderr)
            continue
        for dim, a16, n, line in _mimg_asm_lines(e, dm_of[op]):
            keys.append((op, dim, a16, n))
            lines.append(line)
    addr: dict = {op: [None] * 16 for op in normal}
    for (op, dim, a16, n), ok in zip(keys, assemble_ok(lines, target)):
        if ok and addr[op][dim + 8 * a16] is None:
            addr[op][dim + 8 * a16] = n

    # (b) LLVM's variants, by disassembling
    b = Batch()
    for op, e in tab.items():
        base = dict(e["base"])
        if op not in normal:  # BVH: fixed address counts per a16 and NSA size
            for a16 in (0, 1):
                b.add(("BA", op, a16), enc(F.MIMG, op, dict(base, a16=a16, vaddr=20, vdata=20)))
                for k in (1, 2, 3):
                    b.add(("BN", op, a16, k), enc(F.MIMG, op, dict(base, a16=a16, nsa=k, vdata=20),
                                                  NSA_REGS[:4 * k]))
            continue
        ddef = _width(e, "vdata")
        dm = 0xF if ddef == 4 else (1 << ddef) - 1
        zero = set(e["z"])
        other = _other_data(ddef, zero)
        # the widths LLVM decodes with before converting: a data register that
        # can not widen (it would pass v255) makes it keep them
        b.add(("A0", op), enc(F.MIMG, op, dict(base, vaddr=40, vdata=256 - ddef, **other)))
        for dim in range(8):
            for a16 in (0, 1):
                b.add(("A", op, dim, a16), enc(F.MIMG, op, dict(base, dmask=dm, dim=dim, a16=a16,
                                                                vaddr=40, vdata=20)))
                b.add(("AX", op, dim, a16), enc(F.MIMG, op, dict(base, dim=dim, a16=a16, vaddr=40,
                                                                 vdata=20, **other)))
        for dmask in (1, 3, 7, 15):
            for tfe in (0, 1):
                for d16 in (0, 1):
                    if (tfe and "tfe" in zero) or (d16 and "d16" in zero):
                        continue
                    for dim in range(8):  # any dim whose address variant exists
                        b.add(("D", op, dmask, tfe, d16, dim),
                              enc(F.MIMG, op, dict(base, dmask=dmask, tfe=tfe, d16=d16, dim=dim,
                                                   vaddr=40, vdata=20)))
        for k in (1, 2, 3):
            for a16 in (0, 1):
                vals = dict(base, nsa=k, a16=a16, dim=7, dmask=0xF, vdata=256 - ddef)
                if "tfe" not in zero:
                    vals["tfe"] = 1
                b.add(("N", op, k, a16), enc(F.MIMG, op, vals, NSA_REGS[:4 * k]))
                for dim in range(8):
                    b.add(("NV", op, k, a16, dim), enc(F.MIMG, op, dict(
                        base, nsa=k, a16=a16, dim=dim, dmask=dm, vdata=20), NSA_REGS[:4 * k]))
    res = b.run(target)

    for op, e in tab.items():
        if op not in normal:
            widths = [None] * 16
            nsa = {}
            for a16 in (0, 1):
                r = res[("BA", op, a16)]
                widths[8 * a16] = _printed_width(r[0], _operand_index(e, "vaddr")) if r else None
                for k in (1, 2, 3):
                    r = res[("BN", op, a16, k)]
                    if r:
                        nsa[f"{k},{a16}"] = _nsa_count(r[0])
            e["img"] = {"bvh": True, "a": widths, "nsa": nsa}
            continue
        a = addr[op]
        vdi, vai = _operand_index(e, "vdata"), _operand_index(e, "vaddr")
        ddef = _width(e, "vdata")
        gather = ddef == 4
        other = _other_data(ddef, set(e["z"]))
        r0 = res[("A0", op)]
        adef = _printed_width(r0[0], vai) if r0 else None
        if adef is None or _printed_width(r0[0], vdi) != ddef:
            print(f"{target}: MIMG {e['m']}: no default widths {r0}", file=sys.stderr)
            adef = _width(e, "vaddr")
        dx = bin(other["dmask"]).count("1") if not gather else 4
        dx = (dx + 1) // 2 if other.get("d16") else dx
        dx += other.get("tfe", 0)
        for dim in range(8):
            for a16 in (0, 1):
                if a[dim + 8 * a16] is not None:
                    continue
                # the assembler refuses this dim (e.g. image_msaa_load takes MSAA
                # dims only); the disassembler still converts when it can
                r, rx = res[("A", op, dim, a16)], res[("AX", op, dim, a16)]
                p = _printed_width(r[0], vai) if r else None
                if p is not None and p != adef:
                    a[dim + 8 * a16] = p
                elif rx and _printed_width(rx[0], vdi) == dx:
                    a[dim + 8 * a16] = _printed_width(rx[0], vai)
        av, dv, nv = set(), set(), set()
        for dim in range(8):
            for a16 in (0, 1):
                n = a[dim + 8 * a16]
                r = res[("A", op, dim, a16)]
                if n is None or r is None:
                    continue
                n2 = 16 if n > 12 else n
                if _printed_width(r[0], vai) == n2:
                    av.add(n2)
        for dmask in (1, 3, 7, 15):
            for tfe in (0, 1):
                for d16 in (0, 1):
                    d = 4 if gather else bin(dmask).count("1")
                    if d16:
                        d = (d + 1) // 2
                    d += tfe
                    for dim in range(8):
                        n = a[dim]
                        r = res.get(("D", op, dmask, tfe, d16, dim))
                        if r is None or n is None or (16 if n > 12 else n) not in av:
                            continue
                        if _printed_width(r[0], vdi) == d:
                            dv.add(d)
                        break
        nsa = {}
        for k in (1, 2, 3):
            for a16 in (0, 1):
                r = res[("N", op, k, a16)]
                if r:
                    nsa[f"{k},{a16}"] = _nsa_count(r[0])
                for dim in range(8):
                    n = a[dim + 8 * a16]
                    r = res[("NV", op, k, a16, dim)]
                    if r is None or n is None or n < 2:
                        continue
                    if _nsa_count(r[0]) == n and n < nsa.get(f"{k},{a16}", 0):
                        nv.add(n)
        e["img"] = {"a": a, "ad": adef, "av": sorted(av), "dv": sorted(dv | {ddef}), "nsa": nsa,
                    "nv": sorted(nv), "g": gather}


# ---------------------------------------------------------------------------
SRC_SPECIAL = (0, 42, *range(100, 128), 128, 200, 240, 248, *range(235, 240), *range(251, 256),
               276)
COMMENT = re.compile(r"/\*.*?\*/")


def raw_operands(text: str) -> list[str]:
    """Operand tokens of an instruction text with LLVM's /*...*/ comments
    kept (commas inside comments do not split)."""
    saved = COMMENT.findall(text)
    masked = COMMENT.sub("\0", text)
    if masked.startswith("exp "):
        masked = "exp " + masked.split(" ", 2)[2]
    _, toks, _ = split_text(masked)
    out = []
    for t in toks:
        while "\0" in t:
            t = t.replace("\0", saved.pop(0), 1)
        out.append(t)
    return out


def spelling_values(fmt: F.Format, d: list) -> list[int]:
    """Field values probed for a scalar-capable operand's spelling."""
    fld = fmt.field(d[1])
    if d[2] in ("src", "ss"):
        return [v for v in SRC_SPECIAL if v <= fld.mask]
    scale = {"sbase": 2, "srsrc": 4, "ssamp": 4}.get(d[1], 1)
    vals = [v for v in range(fld.mask + 1) if v * scale in (0, 40, *range(100, 128))]
    if fld.width == 8:  # a destination LLVM decodes like a source
        vals += [128, 200, 240, 248, *range(235, 240), *range(251, 256)]
    return vals


def round5(target: str, r1: dict) -> None:
    """How LLVM spells unusual values of scalar-capable operands: the
    register-class comments it appends (a scalar register in a VGPR-only
    operand, m0/exec in SReg_32_XM0_XEXEC, vcc/exec as a 128-bit tuple,
    src_lds_direct outside vector sources), values it rejects or accepts
    against the general rules, and 8-bit scalar destinations it decodes
    like sources (constants print as /*invalid immediate*/)."""
    from kpatch.isa.tables import _operand
    from kpatch.isa.text import Ctx, plain_operand_text
    b = Batch()
    lit = LIT.to_bytes(4, "little")
    todo = []
    for fmtname, tab in r1.items():
        # FLAT spells saddr itself ("off", scratch modes)
        if fmtname.startswith("_") or fmtname not in F.FORMATS or fmtname == "FLAT":
            continue
        fmt = F.FORMATS[fmtname]
        for op, e in tab.items():
            for i, d in enumerate(e["o"]):
                if d[0] != "f" or d[2] not in ("src", "ss", "s"):
                    continue
                todo.append((fmtname, op, i))
                for v in spelling_values(fmt, d):
                    vals = dict(e["base"])
                    vals[d[1]] = v
                    b.add(("SP", fmtname, op, i, v), enc(fmt, op, vals, lit))
    res = b.run(target)
    ctx = Ctx({}, LIT, None, None, None)
    for fmtname, op, i in todo:
        fmt = F.FORMATS[fmtname]
        e = r1[fmtname][op]
        d = e["o"][i]
        vals = spelling_values(fmt, d)
        llvm = {}
        for v in vals:
            r = res[("SP", fmtname, op, i, v)]
            toks = raw_operands(r[0]) if r else None
            llvm[v] = None if r is None else (toks[i] if i < len(toks) else "")
        if d[2] == "s" and fmt.field(d[1]).width == 8 and llvm.get(128) == "/*invalid immediate*/":
            d[2] = "ss"  # decoded like a source: constants and literals are read
            d[4:] = ["reg"]
        if len(d) < 5:
            d.append("b32")
        opnd = _operand(d)
        scalar = [v for v in vals if v < 128]
        ours = {v: plain_operand_text(opnd, ctx, v) for v in vals}
        sfx = ""
        sg = [v for v in scalar if v * {"sbase": 2, "srsrc": 4, "ssamp": 4}.get(d[1], 1) in (0, 40, 42)]
        if sg and all(ours[v] and llvm[v] and llvm[v].startswith(ours[v] + "/*") for v in sg):
            sfx = llvm[sg[0]][len(ours[sg[0]]):]
        ov = {}
        for v in vals:
            exp = ours[v]
            if exp is not None and sfx and (d[2] == "s" or v < 128):
                exp += sfx
            if llvm[v] != exp:
                ov[str(v)] = llvm[v]
        # a VGPR where LLVM wants a scalar register: a comment on every VGPR
        vsfx = ""
        if "276" in ov and ours[276] and (ov["276"] or "").startswith(ours[276] + "/*"):
            vsfx = ov.pop("276")[len(ours[276]):]
        if sfx or ov or vsfx:
            d[5:] = [{k: x for k, x in (("sfx", sfx), ("vsfx", vsfx), ("ov", ov)) if x}]


def probe_target(target: str) -> dict:
    r1 = round1(target)
    round2(target, r1)
    round3(target, r1)
    round4(target, r1)
    round5(target, r1)
    return r1


def infer_style(fmtname: str, e: dict, names: dict) -> tuple[str | None, bool]:
    """SOPP/SOPK immediate style consistent with every probe, and whether
    LLVM rejects nonzero immediates."""
    probes = e["imm_probe"]
    zero_only = all(t is None for v, t in probes.items() if v != 0)
    imm_pos = next((i for i, d in enumerate(e["o"]) if d[0] != "f" and d[0] != "lit"), None)
    for style in list(SP.STYLES) + list(SP.NAMED_STYLES):
        ok = True
        for v, txt in probes.items():
            if txt is None:
                continue
            t = SP.imm_text(style, v, names)
            if fmtname == "SOPP":
                exp = e["m"] if t is None else f"{e['m']} {t}"
                if exp != txt:
                    ok = False
                    break
            else:
                full = txt
                mn, toks, _ = split_text(clean(full))
                if style == "hwreg":
                    m = HWREG_RE.search(full)
                    got = m.group(0) if m else None
                else:
                    got = toks[imm_pos] if imm_pos is not None and imm_pos < len(toks) else None
                if got != t:
                    ok = False
                    break
        if ok:
            return style, zero_only
    return None, zero_only


def finalize(target: str, r1: dict) -> dict:
    """The committed table: only what kpatch needs at run time."""
    names = r1.pop("_names")
    out = {"target": target,
           "generated_by": "tools/gen_isa_tables.py (llvm-objdump-16 probes)",
           "names": {"hwreg": {str(k): v for k, v in sorted(names["hwreg"].items())},
                     "sendmsg": {str(k): v for k, v in sorted(names["sendmsg"].items())},
                     "dpp_ctrl": {str(k): v for k, v in sorted(names["dpp_ctrl"].items()) if v},
                     "mtbuf_format": {str(k): v for k, v in sorted(names["mtbuf_format"].items())
                                      if v},
                     "exp_target": {str(k): v for k, v in sorted(names["exp_target"].items())}},
           "formats": {}}
    for fmtname, tab in r1.items():
        ft = out["formats"].setdefault(fmtname, {})
        for op, e in sorted(tab.items()):
            o = []
            for d in e["o"]:
                if d[0] == "lit":
                    o.append(["lit", "hex" if d[-1] in ("b64",) else d[-1]] if len(d) > 1 else ["lit", "hex"])
                elif d[0] == "t" and fmtname in ("SOPK",) and d[1] != "HWREG":
                    o.append(["imm"])
                elif d[0] == "t" and d[1] == "HWREG":
                    o.append(["imm"])
                else:
                    o.append(d)
            ent = {"m": e["m"], "o": o}
            if e["z"]:
                ent["z"] = {z: e["base"].get(z, 0) for z in e["z"]}
            if fmtname in ("SOPP", "SOPK"):
                style, zero_only = infer_style(fmtname, e, names)
                if style is None:
                    print(f"{target}: {fmtname} {e['m']}: no immediate style fits", file=sys.stderr)
                    style = "hex"
                ent["imm"] = style
                if zero_only:
                    ent["imm_zero"] = True
            if fmtname == "VOP3":
                if any(d[0] == "f" and d[1] == "sdst" for d in o):
                    ent["b"] = True
                if e.get("high"):
                    ent["high"] = True
                ent["mods"] = e["vop3mods"]
                if "opsel_n" in e:
                    ent["opsel_n"] = e["opsel_n"]
                    ent["opsel_pos"] = e["opsel_pos"]
            if fmtname == "VOP3P":
                ent["mods"] = e["vop3pmods"]
                if e["mix"]:
                    ent["mix"] = True
            for k in ("sdwa", "dpp16", "dpp8"):
                if k in e:
                    x = {"m": e[k]["m"], "o": e[k]["o"]}
                    if e[k].get("mods"):
                        x["mods"] = e[k]["mods"]
                    if k == "sdwa":
                        x["xbase"] = e[k]["xbase"]
                    if e[k]["z"]:
                        x["z"] = {z: e["base"].get(z, 0) for z in e[k]["z"] if z != "src0"}
                    ent[k] = x
            if "img" in e:
                ent["img"] = e["img"]
            if e.get("ign"):
                ent["ign"] = e["ign"]
            if e.get("base"):
                ent["base"] = e["base"]
            ft[str(op)] = ent
    return out


# ---------------------------------------------------------------------------
# implicit registers, from LLVM's instruction info

IMPLICIT_PATH = os.path.join(OUT_DIR, "implicit.json")
#: formats whose LLVM encodings carry the implicit registers (see the module docstring)
IMPLICIT_FORMATS = ("VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "VINTRP")
LLVM_CONFIG = "llvm-config-16"
_MC_ENCODING = re.compile(r"; encoding: \[([^\]]*)\]")
_MC_INST = re.compile(r"<MCInst #\d+ (\w+)")
_MC_WARNING = re.compile(r"^<stdin>:(\d+):(\d+): (?:warning|error)", re.M)
_SEPARATOR = bytes.fromhex("070080bf")  # s_nop 7
_SEPARATOR_LINE = "0x07 0x00 0x80 0xbf"


def llvm_implicit_regs() -> dict[str, tuple[list[str], list[str]]]:
    """LLVM opcode name -> (implicit uses, implicit defs), from libLLVM-16's
    MCInstrInfo (tools/llvm_implicit_regs.cpp, compiled here)."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++-15")
    if cxx is None or shutil.which(LLVM_CONFIG) is None:
        raise SystemExit("--implicit needs a C++ compiler and llvm-16-dev (llvm-config-16)")
    cfg = lambda *a: subprocess.run([LLVM_CONFIG, *a], capture_output=True, text=True,  # noqa: E731
                                    check=True).stdout.split()
    with tempfile.TemporaryDirectory() as td:
        exe = os.path.join(td, "implicit")
        subprocess.run([cxx, "-std=c++17", os.path.join(HERE, "llvm_implicit_regs.cpp"), *cfg("--cxxflags"),
                        "-o", exe, *cfg("--ldflags"), "-lLLVM-16"], check=True)
        out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    regs = {}
    for line in out.splitlines():
        name, uses, defs = line.split("\t")
        regs[name] = (uses.split()[1:], defs.split()[1:])
    return regs


def _entry_probes(fmt: F.Format, key: int, e: dict) -> list[bytes]:
    """Encodings of table entry ``e`` (key = opcode, FLAT: opcode | seg << 7),
    with its literal if it takes one: operand fields 0, the entry's base, the
    base encodings round 1 probes with, EXEC_LO as a VOP3 destination."""
    op, seg = (key & 0x7F, key >> 7) if fmt.name == "FLAT" else (key, None)
    lit = b"\0\0\0\0" if any(o[0] == "lit" for o in e.get("o", [])) else b""
    bases = [{}, e.get("base", {})] + list(base_candidates(fmt.name, seg))
    if fmt.name == "VOP3":
        bases.append({"vdst": 0x7E})  # v_cmpx_*_e64: LLVM wants EXEC_LO's code in vdst
    return [enc(fmt, op, dict(b, **({"seg": seg} if seg is not None else {}))) + lit for b in bases]


def llvm_opcode_names(target: str, table: dict) -> dict[tuple[str, int], str]:
    """(format, opcode) -> the LLVM opcode ``llvm-mc-16 --show-inst`` decodes one
    encoding of each table entry as.  Each probe is its own input line followed
    by a separator line (``s_nop 7``), so the decoded stream splits back into
    probes; a probe counts only when its first instruction is LLVM's reading of
    its first bytes (no warning at its first column)."""
    entries = [((fname, int(op)), _entry_probes(F.FORMATS[fname], int(op), e))
               for fname, ops in table["formats"].items() for op, e in ops.items()]
    names: dict[tuple[str, int], str] = {}
    for attempt in range(max(len(c) for _, c in entries)):
        todo = [(key, c[attempt]) for key, c in entries if key not in names and attempt < len(c)]
        names.update(_mc_names(target, todo))
    return names


def _mc_names(target: str, todo: list) -> dict:
    """The LLVM opcode of each (key, probe) llvm-mc-16 decodes from the probe's first bytes."""
    keys = [k for k, _ in todo]
    probes = [c for _, c in todo]
    text = "".join(" ".join(f"0x{b:02x}" for b in code) + "\n" + _SEPARATOR_LINE + "\n" for code in probes)
    p = subprocess.run(["llvm-mc-16", "--disassemble", "--show-inst", "--show-encoding",
                        "-triple=amdgcn-amd-amdhsa", f"-mcpu={target}"], input=text,
                       capture_output=True, text=True)
    bad = {int(m.group(1)) for m in _MC_WARNING.finditer(p.stderr) if m.group(2) == "1"}
    groups: list[list[tuple[bytes, str]]] = [[]]
    for m, n in zip(_MC_ENCODING.finditer(p.stdout), _MC_INST.finditer(p.stdout)):
        code = bytes(int(x, 16) for x in m.group(1).split(","))
        if code == _SEPARATOR:
            groups.append([])
        else:
            groups[-1].append((code, n.group(1)))
    if len(groups) != len(probes) + 1:
        raise SystemExit(f"{target}: {len(groups) - 1} separators decoded for {len(probes)} probes")
    names = {}
    for k, (key, code) in enumerate(zip(keys, probes)):
        if 2 * k + 1 in bad or not groups[k]:
            continue
        first, name = groups[k][0]
        if code.startswith(first):
            names[key] = name
    return names


def write_implicit(targets, path: str = IMPLICIT_PATH) -> None:
    """tables/implicit.json: per target, format and opcode, the registers LLVM
    says the instruction uses and defines implicitly (lower case)."""
    regs = llvm_implicit_regs()
    out = {"generated_by": "tools/gen_isa_tables.py --implicit (libLLVM-16 MCInstrDesc, llvm-mc-16 --show-inst)",
           "formats": list(IMPLICIT_FORMATS), "targets": {}}
    for t in targets:
        with open(os.path.join(OUT_DIR, f"{t}.json")) as fh:
            table = json.load(fh)
        names = llvm_opcode_names(t, table)
        per: dict = {}
        missing = []
        for (fname, op), name in sorted(names.items()):
            if fname not in IMPLICIT_FORMATS:
                continue
            uses, defs = regs[name]
            per.setdefault(fname, {})[str(op)] = {"llvm": name, "uses": [r.lower() for r in uses],
                                                  "defs": [r.lower() for r in defs]}
        for fname, ops in table["formats"].items():
            if fname in IMPLICIT_FORMATS:
                missing += [f"{fname} {op} {e.get('m')}" for op, e in ops.items() if str(op) not in per[fname]]
        out["targets"][t] = per
        print(f"{t}: {sum(map(len, per.values()))} vector ALU opcodes with LLVM's implicit registers; "
              f"{len(missing)} that no probe decodes as (kpatch then knows nothing implicit of them): "
              f"{', '.join(missing[:20])}")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=0, sort_keys=True, separators=(",", ":"))
        fh.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=TARGETS, action="append")
    ap.add_argument("--implicit", action="store_true",
                    help="only write tables/implicit.json (LLVM's implicit register uses/defs)")
    args = ap.parse_args()
    targets = args.target or list(TARGETS)
    if args.implicit:
        write_implicit(targets)
        return
    with ProcessPoolExecutor(max_workers=2) as ex:
        results = dict(zip(targets, ex.map(probe_target, targets)))
    os.makedirs(OUT_DIR, exist_ok=True)
    for t, data in results.items():
        table = finalize(t, data)
        path = os.path.join(OUT_DIR, f"{t}.json")
        with open(path, "w") as fh:
            json.dump(table, fh, indent=0, sort_keys=True, separators=(",", ":"))
            fh.write("\n")
        n = sum(len(v) for v in table["formats"].values())
        print(f"{path}: {n} opcodes")


if __name__ == "__main__":
    main()
