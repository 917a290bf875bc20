"""Header actions of rules: the one table from a key of a rule's ``header``
table (``header = {KEY = VALUE}`` in ``rules/*.toml``) to what it does.

The rule loader (:mod:`kpatch.rewrite.rules`) accepts exactly the keys and
values of :data:`HEADER_ACTIONS` (:func:`header_problem` says why not);
:func:`kpatch.rewrite.headers.perform` executes them.  This module imports
nothing heavy (the code-object model only inside an action, when one is
performed): ``kpatch rules`` and ``kpatch explain`` load every rule file
and must start fast.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from kpatch.errors import UsageError

if TYPE_CHECKING:
    from kpatch.codeobject import KernelDescriptor, TargetId


@dataclass(frozen=True)
class HeaderAction:
    """What one key of a rule's ``header`` table does.

    ``scope``: ``kernel`` (the kernels whose findings the rule handled: the
    rule needs ``match.finding``) or ``object`` (the code object itself: the
    rule needs ``match.header = true``).  ``values``: the values kpatch
    performs (any other is rejected when the rule is loaded, with ``why``).
    Kernel actions change a descriptor (``descriptor(kd, value)``) and a
    kernel's metadata map (``metadata(kmd, value)``, True when it changed
    something; ``metadata_key``: the one key of the map it reads and sets,
    when it leaves a map without that key as it is, so that such maps need
    not be decoded for it); object actions change the target id
    (``target(tid, value)``).
    """

    key: str
    scope: str
    values: tuple
    why: str
    doc: str
    descriptor: Callable | None = None
    metadata: Callable | None = None
    target: Callable | None = None
    metadata_key: str | None = None


def _wgp_descriptor(kd: KernelDescriptor, value: bool) -> None:
    kd.set("WGP_MODE", int(value))


WGP_MODE_KEY = ".workgroup_processor_mode"


def _wgp_metadata(kmd: dict, value: bool) -> bool:
    if WGP_MODE_KEY not in kmd:
        return False
    kmd[WGP_MODE_KEY] = int(value)
    return True


def _set_mach(t: TargetId, value: str) -> TargetId:
    """The processor ``value``, keeping the features it supports."""
    from kpatch.codeobject.target import mach_for_processor

    m = mach_for_processor(value)
    return replace(t, processor=value, xnack=t.xnack if m.xnack else None,
                   sramecc=t.sramecc if m.sramecc else None, generic_version=None)


def _set_xnack(t: TargetId, value: str) -> TargetId:
    """The xnack setting ``value`` (UsageError when the processor has no xnack feature)."""
    if not t.mach.xnack:
        raise UsageError(f"{t.processor} has no xnack setting to change")
    return replace(t, xnack=value)


#: Rule header key -> what it does (the only keys and values the loader accepts).
HEADER_ACTIONS: dict[str, HeaderAction] = {a.key: a for a in (
    HeaderAction("wgp_mode", "kernel", (False,),
                 "kpatch only switches kernels to CU mode (WGP mode is what gfx1010's LdsMisalignedBug needs "
                 "avoided)",
                 "RSRC1.WGP_MODE in the descriptor and .workgroup_processor_mode in the metadata",
                 descriptor=_wgp_descriptor, metadata=_wgp_metadata, metadata_key=WGP_MODE_KEY),
    HeaderAction("mach", "object", ("gfx1010",),
                 "kpatch makes code safe for gfx1010 only, so it labels objects gfx1010 only",
                 "the processor in e_flags and amdhsa.target", target=_set_mach),
    HeaderAction("xnack", "object", ("-",),
                 "gfx1030 code was never made XNACK-replay safe, so kpatch never labels it xnack+ or any",
                 "the xnack setting in e_flags and amdhsa.target", target=_set_xnack),
)}


def header_problem(key: str, value) -> str | None:
    """Why kpatch cannot perform header action ``key = value`` (None: it can)."""
    a = HEADER_ACTIONS.get(key)
    if a is None:
        return f"unknown header action (known: {', '.join(HEADER_ACTIONS)})"
    if type(value) is not type(a.values[0]) or value not in a.values:
        shown = ", ".join(repr(v).lower() if isinstance(v, bool) else repr(v) for v in a.values)
        return f"kpatch performs only {key} = {shown}: {a.why}"
    return None
