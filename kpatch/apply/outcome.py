"""What apply reads back from a patch function: one outcome per kernel and
the new bytes.

The rules engine (:func:`kpatch.rewrite.patcher.patch_code_object`) and the
relabeller (:mod:`kpatch.apply.relabel`) are patch functions; tests pass
their own.  :func:`adapt_result` reads whatever object one returns (by
attribute) into these types, so the orchestration never depends on the
engine's classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from kpatch.errors import UsageError

KERNEL_STATUSES = ("patched", "refused", "untouched")


@dataclass(frozen=True)
class KernelOutcome:
    """What happened to one kernel of a code object."""

    name: str
    status: str  # patched | refused | untouched
    reason: str = ""
    rules: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"name": self.name, "status": self.status, "reason": self.reason, "rules": list(self.rules)}


@dataclass(frozen=True)
class PatchResult:
    """The result of patching one code object: new bytes (None = unchanged)
    and one outcome per kernel."""

    data: bytes | None
    kernels: tuple[KernelOutcome, ...] = field(default_factory=tuple)

    @property
    def changed(self) -> bool:
        return self.data is not None


PatchFn = Callable[..., Any]  # (data, *, mode, rule_sets) -> PatchResult-like
ProvenanceFn = Callable[[bytes], Any]  # code object bytes -> record or None


def adapt_result(result: Any, original: bytes) -> PatchResult:
    """A :class:`PatchResult` from the engine's result object (duck-typed).

    ``data`` equal to the original bytes, or ``changed`` false, counts as
    unchanged; a kernel status outside :data:`KERNEL_STATUSES` is an error
    of the engine (UsageError naming it)."""
    data = getattr(result, "data", None)
    changed = bool(getattr(result, "changed", data is not None))
    if data is not None:
        data = bytes(data)
    if not changed or data == original:
        data = None
    kernels = []
    for k in getattr(result, "kernels", None) or ():
        status = str(getattr(k, "status", ""))
        if status not in KERNEL_STATUSES:
            raise UsageError(f"patch function returned kernel status {status!r} "
                             f"(expected one of {', '.join(KERNEL_STATUSES)})")
        kernels.append(KernelOutcome(str(getattr(k, "name", "")), status,
                                     str(getattr(k, "reason", "") or ""),
                                     tuple(str(r) for r in (getattr(k, "rules", None) or ()))))
    return PatchResult(data, tuple(kernels))
