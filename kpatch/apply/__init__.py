"""apply: `kpatch apply` and the load-time patcher's orchestration.

What the rewriter (:mod:`kpatch.rewrite`) does to one code object, this
package does to the places code objects live, whole or not at all:

* :mod:`.modes` -- the modes (override, native, relabel, harden), the rule
  sets each uses and the patch function each calls.
  What a patch function returns is the rewriter's own result types
  (:mod:`kpatch.rewrite.outcome`: :class:`KernelOutcome`, :class:`PatchResult`).
* :mod:`.relabel` -- ``--mode relabel``: the target label changed, code unchanged.
* :mod:`.blob` -- one blob: a code object, a clang offload bundle or a CCOB.
* :mod:`.db` -- a MIOpen kernel DB into a user DB (:mod:`.userdb` writes it,
  with backups and revert).
* :mod:`.file` -- one file (a host ELF's fat binaries, a bundle, a code object).
* :mod:`.directory` -- a rocBLAS/Tensile library directory as one unit.
"""
