"""The per-code-object patch function `kpatch apply` calls, and its results.

The rules engine (``kpatch.rewrite.patcher``, written separately) provides::

    patch_code_object(data: bytes, *, mode: str, rule_sets: list[str]) -> PatchResult

where the result has ``data`` (the patched code object, or None when
unchanged), ``kernels`` (one outcome per kernel: ``name``, ``status`` in
``patched`` / ``refused`` / ``untouched``, ``reason``, ``rules``) and
``changed``.  This module holds kpatch's own copy of those result types and
adapts whatever object the engine returns to them (by attribute), so the
orchestration never depends on the engine's classes.  ``--mode relabel``
needs no rules engine: it uses :func:`kpatch.apply.relabel.relabel_code_object`.

The provenance check (``kpatch.rewrite.provenance.read_provenance``) is
adapted the same way: until it exists, nothing counts as already patched
by provenance (apply then relies on comparing bytes).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from kpatch.errors import UsageError
from kpatch.rewrite.patcher import DEFAULT_RULE_SETS as ENGINE_DEFAULTS

#: The modes of `kpatch apply` (see kpatch/miopen/device.py for the default;
#: ``harden`` is only chosen by ``--mode``).
MODES = ("override", "native", "relabel", "harden")

#: Processor whose code each mode takes as input, and the label it produces.
SOURCE_PROCESSOR = {"override": "gfx1030", "native": "gfx1030", "relabel": "gfx1010", "harden": "gfx1010"}
RESULT_PROCESSOR = {"override": "gfx1030", "native": "gfx1010", "relabel": "gfx1030", "harden": "gfx1010"}

#: Rule sets used when the user gives no ``--rules``: the rules engine's
#: defaults (relabel changes no code and uses none).
DEFAULT_RULE_SETS = {**{m: list(s) for m, s in ENGINE_DEFAULTS.items()}, "relabel": []}

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


def _optional(module: str, name: str) -> Any | None:
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.startswith(e.name):
            return None
        raise
    return getattr(mod, name, None)


def default_patch_fn(mode: str) -> PatchFn:
    """The patch function for ``mode``: the built-in relabeller for
    ``relabel``, the rules engine otherwise (UsageError if it is missing)."""
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r} (choose {', '.join(MODES)})")
    if mode == "relabel":
        from kpatch.apply.relabel import relabel_patch_fn

        return relabel_patch_fn
    fn = _optional("kpatch.rewrite.patcher", "patch_code_object")
    if fn is None:
        raise UsageError(f"--mode {mode} needs kpatch's rules engine (kpatch.rewrite.patcher), "
                         "which this installation does not have yet; --mode relabel works without it")
    return fn


def default_provenance_fn() -> ProvenanceFn:
    """``kpatch.rewrite.provenance.read_provenance`` if available, else a
    function that finds no provenance."""
    fn = _optional("kpatch.rewrite.provenance", "read_provenance")
    return fn if fn is not None else (lambda data: None)
