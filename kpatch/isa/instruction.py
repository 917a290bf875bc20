"""Decoded instructions.

:class:`Decoded` is everything about one distinct encoding (shared by every
occurrence of the same bytes); :class:`Instruction` is one occurrence: an
address plus its :class:`Decoded`.
"""

from __future__ import annotations


class Decoded:
    """One encoding: format, opcode entry, field values and text.

    ``fmt``/``info`` are None for an unknown word (``is_unknown``), whose text
    is LLVM's ``.long 0x...``.
    """

    __slots__ = ("raw", "size", "fmt", "info", "kind", "fields", "extra", "literal", "_text",
                 "target", "_regs")

    def __init__(self, raw, fmt, info, kind, fields, extra, literal, text, target):
        self.raw = raw
        self.size = len(raw)
        self.fmt = fmt
        self.info = info
        self.kind = kind
        self.fields = fields
        self.extra = extra
        self.literal = literal
        self._text = text
        self.target = target
        self._regs = None

    @property
    def is_unknown(self) -> bool:
        return self.fmt is None

    @property
    def text(self) -> str:
        if self._text is None:
            if len(self.raw) == 4:
                return ".long 0x%08x" % int.from_bytes(self.raw, "little")
            return ".byte " + ", ".join("0x%02x" % b for b in self.raw)
        return self._text

    @property
    def mnemonic(self) -> str:
        if self.fmt is None:
            return ".long"
        return self._text.split(" ", 1)[0]

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
        return None if self.d.extra is None else dict(self.d.extra)

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
