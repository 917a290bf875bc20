"""What the rules ask the rewriter to do, and how it says no.

An :class:`Edit` names one existing instruction (by its virtual address in
``.text``) and replaces it or puts code in front of / behind it.  The
rewriter (:mod:`kpatch.rewrite.relocate`) applies edits in place when sizes
match and otherwise moves the code that follows; whatever it cannot move
with certainty it refuses with a :class:`Refusal` that names the reason.

:func:`group_edits` turns a list of edits into one :class:`Slot` per
instruction (the order of edits at the same place is kept).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kpatch.errors import KpatchError, UsageError

ACTIONS = ("replace", "insert_before", "insert_after")


@dataclass(frozen=True)
class Edit:
    """One change to the code, asked for by rule ``rule``.

    ``address``: vaddr of an existing instruction in ``.text``.
    ``action``: ``replace`` (the instruction becomes ``code``, which may have
    another size; empty code deletes it), ``insert_before`` (``code`` runs
    just before the instruction: a branch to the instruction lands on
    ``code``, which is where a mitigation guarding the instruction belongs),
    ``insert_after`` (``code`` runs right after the instruction; after a
    conditional branch that is the fall-through path only).
    ``code``: encoded instruction(s), a multiple of 4 bytes.
    """

    address: int
    action: str
    code: bytes
    rule: str
    note: str = ""

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise UsageError(f"edit action must be one of {', '.join(ACTIONS)}, not {self.action!r}")
        if not isinstance(self.code, (bytes, bytearray)):
            raise UsageError(f"edit code must be bytes, not {type(self.code).__name__}")
        if len(self.code) % 4:
            raise UsageError(f"edit code at {self.address:#x} is {len(self.code)} bytes, "
                             f"not a multiple of 4")
        if self.action != "replace" and not self.code:
            raise UsageError(f"{self.action} at {self.address:#x} has no code")
        _check_address(self.address)

    def at(self, address: int) -> "Edit":
        """This edit at the instruction at ``address`` instead: one rule puts
        the same code at every finding it fixes (hundreds of thousands in
        an object), so its edit is made and checked once and only the
        address is checked at each place.  Equal to
        ``Edit(address, self.action, self.code, self.rule, self.note)``."""
        _check_address(address)
        e = _new(Edit)
        e.__dict__.update(address=address, action=self.action, code=self.code, rule=self.rule, note=self.note)
        return e


_new = object.__new__


def _check_address(address: int) -> None:
    """UsageError unless ``address`` can name an instruction (4-byte aligned, not negative)."""
    if address < 0 or address % 4:
        raise UsageError(f"edit address {address:#x} is not a 4-byte aligned address")


#: Short names of refusal reasons (``Refusal.kind``).
REFUSAL_KINDS = {
    "pc-relative": "an s_getpc_b64 result used in a way kpatch does not recognise",
    "undecodable": "code kpatch cannot decode, so it cannot find its PC-relative uses",
    "branch-target": "a branch or call whose target is not an instruction",
    "falls-through": "code that runs past the end of its function",
    "computed-jump": "s_setpc_b64/s_swappc_b64 to an address kpatch cannot bound",
    "unsupported": "a PC-relative instruction kpatch does not relocate",
    "branch-range": "a branch whose new offset does not fit 16 bits",
    "edit-pc-relative": "an edit that replaces, splits or inserts PC-relative code",
    "edit-conflict": "two edits that contradict each other",
    "immovable": "the object holds code that pins every address, so code cannot move",
    "shared-code": "a function shared with a refused kernel",
    "data-target": "a PC-relative reference whose target kpatch cannot place after the move",
    "layout": "an ELF layout kpatch cannot rewrite",
}


class Refusal(KpatchError):
    """The rewriter will not patch ``kernel`` (None: the whole object).

    ``reason`` starts with ``cannot relocate:`` (or ``cannot patch:``) and
    names the instruction address; ``kind`` is one of :data:`REFUSAL_KINDS`.
    """

    def __init__(self, reason: str, kernel: str | None = None, *, kind: str = "layout",
                 address: int | None = None):
        super().__init__(reason, item=kernel)
        self.kernel = kernel
        self.kind = kind
        self.address = address

    def __repr__(self) -> str:
        return f"Refusal({self.kernel!r}, {self.kind!r}, {self.reason!r})"

    def for_kernel(self, kernel: str | None) -> "Refusal":
        """The same refusal, attributed to ``kernel``."""
        return Refusal(self.reason, kernel, kind=self.kind, address=self.address)


class CannotFix(Exception):
    """One kernel's fix cannot be done exactly (``reason`` says why: no
    spare registers, a form with no gfx1010 equivalent, two rules that
    disagree...).  Fixes and the register budget raise it; the patcher
    turns it into that kernel's refusal (the rest of the object goes on)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Slot:
    """Every edit at one instruction: code before it, its replacement, code after it."""

    before: list[Edit] = field(default_factory=list)
    replace: Edit | None = None
    after: list[Edit] = field(default_factory=list)

    @property
    def edits(self) -> list[Edit]:
        return self.before + ([self.replace] if self.replace else []) + self.after

    def count(self) -> int:
        """How many edits there are (``len(edits)``, without making the list)."""
        return len(self.before) + (self.replace is not None) + len(self.after)

    def before_code(self) -> bytes:
        return b"".join(e.code for e in self.before)

    def after_code(self) -> bytes:
        return b"".join(e.code for e in self.after)

    def body(self, original: bytes) -> bytes:
        """The instruction's own bytes after the edit (``original`` if not replaced)."""
        return original if self.replace is None else bytes(self.replace.code)

    def before_size(self) -> int:
        """Bytes of the code inserted before the instruction (``len(before_code())``)."""
        return sum(len(e.code) for e in self.before) if self.before else 0

    def after_size(self) -> int:
        """Bytes of the code inserted after the instruction (``len(after_code())``)."""
        return sum(len(e.code) for e in self.after) if self.after else 0

    def size_change(self, original_size: int) -> int:
        """Bytes this slot adds (negative: removes)."""
        body = original_size if self.replace is None else len(self.replace.code)
        return self.before_size() + body - original_size + self.after_size()


def group_edits(edits: list[Edit]) -> tuple[dict[int, Slot], list[tuple[int, str]]]:
    """Slots by instruction address, and conflicts as (address, reason).

    Two replacements of one instruction are a conflict unless they are
    identical (the second is dropped); edits keep their list order.
    """
    slots: dict[int, Slot] = {}
    conflicts: list[tuple[int, str]] = []
    for e in edits:
        if not isinstance(e, Edit):
            raise UsageError(f"expected an Edit, got {type(e).__name__}")
        s = slots.get(e.address)
        if s is None:
            s = slots[e.address] = Slot()
        if e.action == "insert_before":
            s.before.append(e)
        elif e.action == "insert_after":
            s.after.append(e)
        elif s.replace is None:
            s.replace = e
        elif bytes(s.replace.code) != bytes(e.code):
            conflicts.append((e.address, f"rules {s.replace.rule} and {e.rule} replace the "
                                         f"instruction at {e.address:#x} differently"))
    return slots, conflicts
