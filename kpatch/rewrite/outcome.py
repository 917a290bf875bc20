"""What patching one code object gives: one outcome per kernel (and device
function) and the new bytes.

The one pair of result types.  A *patch function* - the rules engine
(:func:`kpatch.rewrite.patcher.patch_code_object`), the relabeller
(:func:`kpatch.apply.relabel.relabel_patch_fn`), or a test's own - takes
``(data, *, mode, rule_sets)`` and returns a :class:`PatchResult`; apply
(:mod:`kpatch.apply`) reads it as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

KERNEL_STATUSES = ("patched", "refused", "untouched")


@dataclass(frozen=True)
class KernelOutcome:
    """What happened to one kernel (or device function) of a code object."""

    name: str
    status: str  # patched | refused | untouched
    reason: str = ""
    rules: tuple[str, ...] = ()  # ids of the rules used
    #: the emulation verdict (apply --verify-emulate): equal | within ulp | different |
    #: not verified; None when the kernel was not emulated
    verified: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "reason": self.reason, "rules": list(self.rules),
                "verified": self.verified}


@dataclass(frozen=True)
class PatchResult:
    """The result of patching one code object: the new bytes (None:
    unchanged, nothing to write) and one outcome per kernel; the engine adds
    its device functions' outcomes, the relocation counts, the provenance
    record it wrote (or found) and a note for the whole object."""

    data: bytes | None
    kernels: tuple[KernelOutcome, ...] = ()
    relocations: dict[str, int] = field(default_factory=dict)
    provenance: dict | None = None
    note: str = ""
    functions: tuple[KernelOutcome, ...] = ()  # device functions
    #: why an object that was patched is not written (apply --verify-emulate found a
    #: kernel different): apply reports the object refused, not unchanged
    withheld: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "kernels", tuple(self.kernels))
        object.__setattr__(self, "functions", tuple(self.functions))

    @property
    def changed(self) -> bool:
        """Are there new bytes to write?"""
        return self.data is not None

    @property
    def unchanged(self) -> list[KernelOutcome]:
        """Refused kernels of a written object (override mode): their code is the original's."""
        return [k for k in self.kernels if k.status == "refused"] if self.data is not None else []


PatchFn = Callable[..., PatchResult]  # (data, *, mode, rule_sets) -> PatchResult
ProvenanceFn = Callable[[bytes], Any]  # code object bytes -> record or None
