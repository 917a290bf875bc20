"""Decoded instructions.

:class:`Decoded` is everything about one distinct encoding (shared by every
occurrence of the same bytes); :class:`Instruction` is one occurrence: an
address plus its :class:`Decoded`.

Decoding only decides *what* an encoding is (format, opcode entry, form,
size, validity); field values, the trailing literal, the text and the
register sets are worked out from the bytes on first use, so that scanning
code costs no more than finding its boundaries.
"""

from __future__ import annotations

from kpatch.isa import formats as F
from kpatch.isa.formats import extra_format

_EXTRACT = {name: fmt.extractor() for name, fmt in F.FORMATS.items()}
_EXTRACT_X = {name: F.make_extractor(fields) for name, fields in F.EXTRA_FORMATS.items()}


class Decoded:
    """One encoding: format, opcode entry, form and (lazily) fields and text.

    ``fmt``/``info`` are None for an unknown word (``is_unknown``), whose text
    is LLVM's ``.long 0x...``.  ``kind`` is None for the base form or
    ``"sdwa"``/``"dpp16"``/``"dpp8"``.
    """

    __slots__ = ("raw", "size", "fmt", "info", "kind", "target", "_fields", "_extra", "_literal",
                 "_text", "_regs")

    def __init__(self, raw: bytes, fmt, info, kind, target: str, text: str | None = None):
        self.raw = raw
        self.size = len(raw)
        self.fmt = fmt
        self.info = info
        self.kind = kind
        self.target = target
        self._fields = None
        self._extra = False  # not computed yet (None is a valid value)
        self._literal = False
        self._text = text
        self._regs = None

    @property
    def is_unknown(self) -> bool:
        return self.fmt is None

    @property
    def form(self):
        """The :class:`~kpatch.isa.tables.Form` this encoding prints with."""
        return self.info.form if self.kind is None else getattr(self.info, self.kind)

    @property
    def fields(self) -> dict[str, int]:
        """Field values of the base encoding (name -> value)."""
        f = self._fields
        if f is None:
            if self.fmt is None:
                f = {}
            else:
                f = _EXTRACT[self.fmt.name](int.from_bytes(self.raw[:self.fmt.size], "little"))
            self._fields = f
        return f

    @property
    def extra(self) -> dict[str, int] | None:
        """Fields of the SDWA/DPP dword, or None."""
        x = self._extra
        if x is False:
            x = None
            if self.kind is not None:
                n = self.fmt.size
                x = _EXTRACT_X[extra_format(self.fmt, self.kind)](
                    int.from_bytes(self.raw[n:n + 4], "little"))
            self._extra = x
        return x

    @property
    def literal(self) -> int | None:
        """The trailing 32-bit literal, or None."""
        lit = self._literal
        if lit is False:
            lit = None
            if self.fmt is not None:
                n = self.fmt.size
                if self.kind is not None:
                    n += 4
                elif self.fmt is F.MIMG:
                    n += 4 * ((self.raw[0] >> 1) & 3)
                if len(self.raw) >= n + 4:
                    lit = int.from_bytes(self.raw[n:n + 4], "little")
            self._literal = lit
        return lit

    @property
    def text(self) -> str:
        t = self._text
        if t is None:
            if self.fmt is not None:
                from kpatch.isa.text import render
                t = render(self)
            if t is None:
                t = self.unknown_text()
            self._text = t
        return t

    def unknown_text(self) -> str:
        if len(self.raw) == 4:
            return ".long 0x%08x" % int.from_bytes(self.raw, "little")
        return ".byte " + ", ".join("0x%02x" % b for b in self.raw)

    @property
    def mnemonic(self) -> str:
        if self.fmt is None:
            return ".long"
        return self.form.mnemonic

    @property
    def regs(self):
        if self._regs is None:
            from kpatch.isa.regs import registers
            self._regs = registers(self)
        return self._regs


class Instruction:
    """One decoded instruction at an address.

    Attributes: ``address``, ``size``, ``raw`` (its bytes), ``format`` (format
    name, or ``"UNKNOWN"``), ``opcode``, ``mnemonic`` (as llvm-objdump prints
    it, e.g. ``v_add_f32_e64``), ``fields`` (name -> value of the base
    encoding), ``extra`` (SDWA/DPP dword fields), ``literal`` (trailing 32-bit
    literal or None), ``reads``/``writes`` (registers, see
    :mod:`kpatch.isa.regs`), ``text()``.
    """

    __slots__ = ("address", "d")

    def __init__(self, address: int, d: Decoded):
        self.address = address
        self.d = d

    @property
    def size(self) -> int:
        return self.d.size

    @property
    def raw(self) -> bytes:
        return self.d.raw

    @property
    def is_unknown(self) -> bool:
        return self.d.fmt is None

    @property
    def format(self) -> str:
        return "UNKNOWN" if self.d.fmt is None else self.d.fmt.name

    @property
    def encoding(self) -> str | None:
        """None for the base form, or 'sdwa' / 'dpp16' / 'dpp8'."""
        return self.d.kind

    @property
    def opcode(self) -> int | None:
        return None if self.d.info is None else self.d.info.opcode

    @property
    def mnemonic(self) -> str:
        return self.d.mnemonic

    @property
    def fields(self) -> dict[str, int]:
        return dict(self.d.fields)

    @property
    def extra(self) -> dict[str, int] | None:
        x = self.d.extra
        return None if x is None else dict(x)

    @property
    def literal(self) -> int | None:
        return self.d.literal

    @property
    def target(self) -> str:
        return self.d.target

    @property
    def reads(self):
        return self.d.regs[0]

    @property
    def writes(self):
        return self.d.regs[1]

    def text(self) -> str:
        """The instruction as llvm-objdump-16 prints it (without the comment)."""
        return self.d.text

    def field(self, name: str) -> int:
        return self.d.fields[name]

    @property
    def is_branch(self) -> bool:
        """SOPP branches whose target is address + 4 + simm16*4."""
        m = self.mnemonic
        return self.format == "SOPP" and (m == "s_branch" or m.startswith("s_cbranch_"))

    @property
    def branch_target(self) -> int | None:
        if not self.is_branch and self.mnemonic != "s_call_b64":
            return None
        v = self.d.fields["simm16"]
        if v & 0x8000:
            v -= 0x10000
        return self.address + 4 + 4 * v

    def __repr__(self) -> str:
        return f"<{self.address:#x}: {self.text()}>"
