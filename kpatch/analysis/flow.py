"""What each instruction does to control flow: the one rule behind basic blocks.

The control-flow graph of the hazard analysis (:mod:`kpatch.analysis.cfg`)
and the rewriter's scan of ``.text`` (:mod:`kpatch.analysis.codescan`) both
cut code into blocks by this table, which follows LLVM's AMDGPU instruction
definitions (``SOPInstructions.td``):

========== ======================================= ========== ============= =============
kind       instructions                            ends block falls through may end a
                                                                            function
========== ======================================= ========== ============= =============
FALL       everything else                         no         yes           no
JUMP       ``s_branch``                            yes        no            yes
COND       ``s_cbranch_*``                         yes        yes           no
END        ``s_endpgm*``, ``s_code_end``           yes        no            yes
INDIRECT   ``s_setpc_b64`` (return, computed jump) yes        no            yes
CALL       ``s_swappc_b64``, ``s_call_b64``        no         yes           no
TRAP       ``s_trap``                              no         yes           yes
UNMODELLED ``s_subvector_loop_*``, ``s_rfe_b64``,  yes        no            yes
           ``s_cbranch_join``, ``s_cbranch_g_fork``
========== ======================================= ========== ============= =============

* ``s_branch`` / ``s_cbranch_*`` / ``s_setpc_b64`` / ``s_endpgm*`` /
  ``s_code_end`` are LLVM terminators; all but the conditional branches are
  barriers (no fall-through).  ``s_code_end`` (padding after the last
  function) raises an illegal-instruction exception if run.
* Calls are not terminators: execution resumes after them (LLVM's hazard
  recognizer assumes so too).  A call ends its block only when the caller
  knows an edge from it (a callee inside the same function, see
  :func:`kpatch.analysis.cfg.build_cfg`); the place it returns to is a
  jump target then.
* ``s_trap`` is no terminator either (``isTrap`` only): the trap handler may
  return to the next instruction (llc-16 puts code after the ``s_trap 3`` of
  ``llvm.debugtrap``), so it falls through; ``llvm.trap`` + ``unreachable``
  ends a function with ``s_trap 2`` (the handler ends the wave), so it may
  also be a function's last instruction.
* PC-changing instructions kpatch does not model end their block with no
  known successor (the code after them is not followed from them).

Branch targets (``address + 4 + simm16 * 4``) are the instruction's
(:attr:`kpatch.isa.instruction.Instruction.branch_target`); which targets are
leaders is the caller's (known jump targets, function entries).
"""

from __future__ import annotations

FALL = 0  # ordinary instruction: execution continues with the next one
JUMP = 1  # s_branch: only the target
COND = 2  # s_cbranch_*: the target and the next instruction
END = 3  # s_endpgm*, s_code_end: no successor
INDIRECT = 4  # s_setpc_b64: computed target (return or jump), no known successor
CALL = 5  # s_swappc_b64 / s_call_b64: a call; execution resumes after it
TRAP = 6  # s_trap: the trap handler, then (perhaps) the next instruction
UNMODELLED = 7  # changes the PC in a way kpatch does not follow

#: kinds after which a new block starts
ENDS_BLOCK = frozenset({JUMP, COND, END, INDIRECT, UNMODELLED})
#: kinds whose next instruction (in the same function) is a successor
FALLS_THROUGH = frozenset({FALL, COND, CALL, TRAP})
#: kinds a function's (or a scanned unit's) last instruction may have
ENDS_FUNCTION = frozenset({JUMP, END, INDIRECT, TRAP, UNMODELLED})

_CALLS = frozenset({"s_swappc_b64", "s_call_b64"})
_ENDS = frozenset({"s_endpgm", "s_endpgm_saved", "s_endpgm_ordered_ps_done", "s_code_end"})
#: PC-relative or PC-changing instructions kpatch neither follows nor relocates
UNMODELLED_MNEMONICS = frozenset({"s_rfe_b64", "s_subvector_loop_begin", "s_subvector_loop_end",
                                  "s_cbranch_join", "s_cbranch_g_fork"})


def kind_of(fmt: str | None, mnemonic: str) -> int:
    """The control-flow kind (above) of an instruction of format ``fmt``."""
    if fmt == "SOPP":
        if mnemonic == "s_branch":
            return JUMP
        if mnemonic.startswith("s_cbranch_"):
            return COND
        if mnemonic in _ENDS:
            return END
        if mnemonic == "s_trap":
            return TRAP
        return FALL
    if mnemonic in _CALLS:
        return CALL
    if mnemonic == "s_setpc_b64":
        return INDIRECT
    if mnemonic in UNMODELLED_MNEMONICS:
        return UNMODELLED
    return FALL


def kind(inst) -> int:
    """The control-flow kind of a decoded :class:`~kpatch.isa.instruction.Instruction`."""
    return kind_of(inst.format, inst.mnemonic)
