"""diff: `kpatch diff`, what changed between two code objects.

* :mod:`.functions` -- the functions of ``.text`` the diff aligns, decoded.
* :mod:`.align` -- the instruction alignment (LCS) and field changes.
* :mod:`.branchcheck` -- the control-flow check over an aligned pair.
* :mod:`.compare` -- pairs the inputs' code objects and compares headers,
  metadata, descriptors and code; :func:`~.compare.diff_inputs`.
* :mod:`.text` / :mod:`.html` -- the two renderings of a comparison.
"""
