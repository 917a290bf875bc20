"""The modes of `kpatch apply` and what each means: which processor's code
it takes and labels, the rule sets it uses when ``--rules`` names none, and
the patch function it calls (the rules engine,
:func:`kpatch.rewrite.patcher.patch_code_object`, or for ``relabel`` the
relabeller, :func:`kpatch.apply.relabel.relabel_patch_fn`).  What a patch
function returns is a :class:`kpatch.rewrite.outcome.PatchResult`.
"""

from __future__ import annotations

from kpatch.rewrite.outcome import PatchFn, ProvenanceFn
from kpatch.apply.relabel import relabel_patch_fn
from kpatch.errors import UsageError
from kpatch.rewrite.patcher import DEFAULT_RULE_SETS as ENGINE_DEFAULTS
from kpatch.rewrite.patcher import patch_code_object
from kpatch.rewrite.provenance import read_provenance

#: The modes of `kpatch apply` (see kpatch/miopen/device.py for the default;
#: ``harden`` is only chosen by ``--mode``).
MODES = ("override", "native", "relabel", "harden")

#: Processor whose code each mode takes as input, and the label it produces.
SOURCE_PROCESSOR = {"override": "gfx1030", "native": "gfx1030", "relabel": "gfx1010", "harden": "gfx1010"}
RESULT_PROCESSOR = {"override": "gfx1030", "native": "gfx1010", "relabel": "gfx1030", "harden": "gfx1010"}

#: Rule sets used when the user gives no ``--rules``: the rules engine's
#: defaults (relabel changes no code and uses none).
DEFAULT_RULE_SETS = {**{m: list(s) for m, s in ENGINE_DEFAULTS.items()}, "relabel": []}

def default_patch_fn(mode: str) -> PatchFn:
    """The patch function for ``mode``: the built-in relabeller for
    ``relabel``, the rules engine otherwise."""
    if mode not in MODES:
        raise UsageError(f"unknown mode {mode!r} (choose {', '.join(MODES)})")
    return relabel_patch_fn if mode == "relabel" else patch_code_object


def default_provenance_fn() -> ProvenanceFn:
    """The rewriter's provenance reader, :func:`kpatch.rewrite.provenance.read_provenance`."""
    return read_provenance
