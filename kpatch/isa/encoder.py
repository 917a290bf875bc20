"""Fields -> bytes.

:func:`encode_fields` packs named field values of a format (plus optional
SDWA/DPP dword, NSA dwords and literal) into bytes; :func:`encode`
re-encodes a decoded instruction, optionally with some fields changed.
Every field layout comes from :mod:`kpatch.isa.formats`, whose fields cover
every bit, so ``encode(decode(x)) == x``.
"""

from __future__ import annotations

from kpatch.errors import UsageError
from kpatch.isa import formats as F

_EXTRA_FIELDS = {"sdwa": F.SDWA, "sdwa_vopc": F.SDWA_VOPC, "dpp16": F.DPP16, "dpp8": F.DPP8}


def _pack(fields_def, values: dict[str, int], start: int = 0) -> int:
    v = start
    known = {f.name: f for f in fields_def}
    for name, val in values.items():
        fld = known.get(name)
        if fld is None:
            raise UsageError(f"no field {name!r}")
        try:
            v = fld.put(v, int(val))
        except ValueError as e:
            raise UsageError(str(e)) from None
    return v


def encode_fields(fmt: F.Format | str, fields: dict[str, int], *, opcode: int | None = None,
                  extra: dict[str, int] | None = None, extra_kind: str | None = None,
                  nsa: bytes = b"", literal: int | None = None) -> bytes:
    """Bytes of an instruction of ``fmt`` with the given field values.

    ``opcode`` (if given) is set after the fields; for FLAT it is the table
    key ``op | seg << 7``.  ``extra`` holds the fields of the SDWA/DPP dword
    named by ``extra_kind`` ("sdwa", "sdwa_vopc", "dpp16", "dpp8").
    """
    if isinstance(fmt, str):
        fmt = F.FORMATS[fmt]
    # VOP3's sdst overlays abs/op_sel: apply it last so it wins when given
    order = sorted(fields.items(), key=lambda kv: kv[0] == "sdst")
    v = fmt.match_value
    for name, val in order:
        v = _pack(fmt.fields, {name: val}, v)
    if opcode is not None:
        if fmt is F.FLAT:
            v = fmt.with_opcode(v, opcode & 0x7F)
            v = fmt.field("seg").put(v, opcode >> 7)
        else:
            v = fmt.with_opcode(v, opcode)
    v = (v & ~fmt.match_mask) | fmt.match_value
    out = v.to_bytes(fmt.size, "little")
    if extra is not None:
        if extra_kind not in _EXTRA_FIELDS:
            raise UsageError(f"unknown extra dword kind {extra_kind!r}")
        out += _pack(_EXTRA_FIELDS[extra_kind], extra).to_bytes(4, "little")
    out += nsa
    if literal is not None:
        out += (literal & 0xFFFFFFFF).to_bytes(4, "little")
    return out


def encode(inst, *, literal: int | None = ..., extra: dict[str, int] | None = None,
           opcode: int | None = None, **changes: int) -> bytes:
    """Re-encode a decoded :class:`~kpatch.isa.instruction.Instruction`.

    Keyword arguments change base-encoding fields (``glc=1``,
    ``simm16=0x40``, ``vdst=3``...); ``extra`` changes SDWA/DPP fields,
    ``literal`` the trailing literal, ``opcode`` the opcode.  Unknown words
    re-encode to their own bytes.
    """
    d = getattr(inst, "d", inst)
    if d.fmt is None:
        if changes or extra or opcode is not None or literal is not ...:
            raise UsageError("cannot change fields of an unknown word")
        return bytes(d.raw)
    fields = dict(d.fields)
    for k, v in changes.items():
        if k not in fields:
            raise UsageError(f"{d.fmt.name} has no field {k!r}")
        fields[k] = v
    if "sdst" in fields and d.fmt is F.VOP3 and "sdst" not in changes:
        del fields["sdst"]  # derived from abs/op_sel bits already present
    xk = None
    x = None
    if d.extra is not None:
        x = dict(d.extra)
        if extra:
            x.update(extra)
        xk = d.kind
        if xk == "sdwa" and d.fmt is F.VOPC:
            xk = "sdwa_vopc"
    elif extra:
        raise UsageError("instruction has no SDWA/DPP dword")
    nsa = b""
    if d.fmt is F.MIMG and d.fields.get("nsa"):
        nsa = bytes(d.raw[8:8 + 4 * d.fields["nsa"]])
    lit = d.literal if literal is ... else literal
    if lit is not None and literal is ... and not _has_literal(d):
        lit = None
    return encode_fields(d.fmt, fields, opcode=opcode, extra=x, extra_kind=xk, nsa=nsa, literal=lit)


def _has_literal(d) -> bool:
    base = d.fmt.size + (4 if d.extra is not None else 0)
    if d.fmt is F.MIMG:
        base += 4 * d.fields.get("nsa", 0)
    return len(d.raw) >= base + 4
