"""kpatch: find, analyse and patch AMD GPU code objects for gfx1010 (RDNA1).

Data flows one way through the sub-packages (ARCHITECTURE.md):

    elf -> containers -> codeobject -> isa -> analysis -> rewrite
        -> miopen -> apply / diff -> delivery -> cli

* ``elf``: ELF64 constants, records and the reader.
* ``containers``: where code objects live (MIOpen kernel DBs, clang offload
  bundles, ``.hip_fatbin`` sections of host ELF files, wheels, directories)
  and the URIs that name each one.
* ``codeobject``: one AMDGPU ELF: header, target id, metadata note, kernel
  descriptors.
* ``isa``: GFX10 decode / encode / text.
* ``analysis``: control flow and gfx1010 findings.
* ``rewrite``: rules, patcher, relocation.
* ``miopen``: MIOpen's DB paths, the machine's mode and CU count.
* ``apply``: `kpatch apply` over DBs, files and directories.
* ``diff``: `kpatch diff`.
* ``delivery``: the load-time hook, its cache, `kpatch run`.
* ``cli``: the ``kpatch`` command.
"""

__version__ = "0.1.0"
