"""VGPRs a kernel never touches, for the fixes that need scratch registers.

Some gfx1010 fixes compute a value into registers of their own (a folded
64-bit FLAT address, a folded scratch address, a dot-product partial sum).
kpatch does not guess which registers are dead: it only hands out VGPRs that
*no instruction the kernel can execute names at all*, so nothing the
kernel does can read or clobber them:

* the code is every instruction of the kernel's range, or of the whole
  ``.text`` when the kernel calls (``s_call_b64``, ``s_swappc_b64``,
  ``s_setpc_b64``: a callee is then somewhere in ``.text``) or its symbol
  has no size;
* ``first_free`` is one past the highest VGPR any of those instructions
  reads or writes, and at least the metadata's ``.vgpr_count`` (LLVM's own
  count, a cross-check of the decoder's register lists);
* ``v_movrels``/``v_movreld``/``v_movrelsd`` index VGPRs through M0, so
  the registers they reach cannot be bounded: such a kernel gets none.

Every fix uses its registers transiently: it writes them and the very next
instruction it emits reads them (VALU and memory instructions read their
VGPR operands at issue - LLVM's register allocator reuses a VMEM address
register right after the access without a wait on gfx10), so all fixes of a
kernel share one block starting at ``first_free``.

Spare VGPRs are first taken from the slack of the hardware allocation
(``(GRANULATED_WORKITEM_VGPR_COUNT + 1) * granule`` is usually above
``first_free``); if that is not enough the allocation grows by whole
granules, which costs occupancy but not correctness - provided the largest
workgroup still fits in the kernel's mode (:func:`kpatch.rewrite.residency.fits`,
the one residency check; a kernel the patcher then puts in CU mode is
checked again there with its final allocation).  Otherwise the kernel is
refused with the count it lacked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kpatch.analysis.detectors.mimg import clause_length
from kpatch.codeobject import CodeObject
from kpatch.isa import decode
from kpatch.rewrite import residency

CALLS = ("s_call_b64", "s_swappc_b64", "s_setpc_b64")
INDEXED = ("v_movrels_b32", "v_movreld_b32", "v_movrelsd_b32", "v_movrelsd_2_b32")
SOURCE_ISA = "gfx1030"


class NoSpareRegisters(Exception):
    """The kernel cannot give the VGPRs a fix needs (``reason`` says why)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass
class KernelCode:
    """The decoded instructions of one kernel, by address."""

    name: str
    insts: list
    index: dict[int, int]
    calls: bool

    @classmethod
    def of(cls, co: CodeObject, kernel) -> "KernelCode":
        text = co.section(".text")
        lo = kernel.entry - text.addr
        hi = lo + kernel.code_size if kernel.code_size else len(co.text)
        insts = decode(co.text[lo:hi], SOURCE_ISA, kernel.entry)
        # without a symbol size the kernel's extent is unknown: count all of .text
        calls = not kernel.code_size or any(i.mnemonic in CALLS for i in insts if not i.is_unknown)
        return cls(kernel.name, insts, {i.address: k for k, i in enumerate(insts)}, calls)

    def at(self, address: int):
        k = self.index.get(address)
        return None if k is None else self.insts[k]

    def clause_covering(self, address: int):
        """The ``s_clause`` whose clause holds the instruction at ``address``, or None."""
        k = self.index.get(address)
        if k is None:
            return None
        for j in range(k - 1, max(-1, k - 64), -1):
            i = self.insts[j]
            if i.mnemonic == "s_clause" and k - j <= clause_length(i.fields["simm16"]):
                return i
        return None


def _max_vgpr(insts) -> int:
    """One past the highest VGPR the instructions name (-1 when one indexes through M0)."""
    top = 0
    for i in insts:
        if i.is_unknown:
            continue
        if i.mnemonic.startswith(INDEXED):
            return -1
        for r in (*i.reads, *i.writes):
            if r.file == "v":
                top = max(top, r.index + r.count)
    return top


@dataclass
class VgprBudget:
    """Spare VGPRs of one kernel: :meth:`take` hands them out."""

    kernel: str
    symbol: str
    target: object  # the Kernel (descriptor, metadata) the registers are for
    first_free: int
    allocated: int
    granule: int
    vgpr_count: int | None  # the metadata's .vgpr_count
    next: int = field(init=False)
    blocked: str = ""  # why no VGPR can be handed out

    def __post_init__(self) -> None:
        self.next = self.first_free

    @classmethod
    def of(cls, co: CodeObject, kernel, code: KernelCode) -> "VgprBudget":
        kd = kernel.descriptor
        md = next((m for m in (co.metadata.kernels if co.metadata is not None else ())
                   if m.get(".symbol") == kernel.symbol), {})
        scope = code.insts
        if code.calls:
            scope = decode(co.text, SOURCE_ISA, co.section(".text").addr)
        top = _max_vgpr(scope)
        blocked = ""
        if top < 0:
            blocked = "it indexes VGPRs through M0 (v_movrel*), so no VGPR can be proved unused"
        count = md.get(".vgpr_count")
        first = max(top, count if isinstance(count, int) else 0)
        return cls(kernel.name, kernel.symbol, kernel, first, kd.vgpr_blocks_count, kd.vgpr_granule,
                   count if isinstance(count, int) else None, blocked=blocked)

    def take(self, n: int, why: str) -> int:
        """The first of ``n`` consecutive spare VGPRs for ``why`` (a transient
        use, see the module docstring); NoSpareRegisters if there are none."""
        if self.blocked:
            raise NoSpareRegisters(f"{why} needs {n} spare VGPR(s), but {self.blocked}")
        want = self.first_free + n
        if want > self.allocated:
            problem = self._cannot_grow(self._whole_granules(want))
            if problem:
                raise NoSpareRegisters(f"{why} needs {n} spare VGPR(s) from v{self.first_free} on, the "
                                       f"allocation is {self.allocated}, and {problem}")
        self.next = max(self.next, want)
        return self.first_free

    def _cannot_grow(self, alloc: int) -> str:
        return residency.fits(self.target, cu_mode=not self.target.descriptor.wgp_mode, vgprs=alloc) or ""

    @property
    def new_allocation(self) -> int | None:
        """The grown allocation in VGPRs, None when the old one suffices."""
        if self.next <= self.allocated:
            return None
        return self._whole_granules(self.next)

    def _whole_granules(self, n: int) -> int:
        """``n`` VGPRs rounded up to what the hardware allocates."""
        return -(-n // self.granule) * self.granule

    @property
    def used(self) -> bool:
        return self.next > self.first_free
