"""kpatch: find, analyse and patch AMD GPU code objects for gfx1010 (RDNA1).

Data flows one way through the sub-packages:

    containers -> codeobject -> isa -> analysis -> rewrite -> outputs -> cli

* ``containers``: where code objects live (MIOpen kernel DBs, clang offload
  bundles, ``.hip_fatbin`` sections of host ELF files, wheels, directories)
  and the URIs that name each one.
* ``codeobject``: one AMDGPU ELF: header, target id, metadata note, kernel
  descriptors.
* ``isa``: GFX10 decode / encode / text.
* ``analysis``: control flow and gfx1010 findings.
* ``rewrite``: rules, patcher, relocation.
* ``outputs``: DB writer, reports.
* ``cli``: the ``kpatch`` command.
"""

__version__ = "0.1.0"
