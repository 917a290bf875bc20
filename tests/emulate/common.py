"""What the emulator's tests share: small gfx1030 kernels assembled by
clang-15, wrong patches made from right ones, the CLI.

:func:`kernel` writes the whole source of a one-kernel code object (the
symbol, the body and its ``s_endpgm``, the kernel descriptor and the
metadata) from what differs between the tests' kernels: the body, the
arguments, register counts, LDS and scratch.  :func:`assemble` makes the
code object.  :func:`mutate` and :func:`with_field` change one instruction
of a kernel (the mutation tests' wrong patches).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from kpatch.codeobject import CodeObject
from kpatch.isa import decode
from kpatch.isa import formats as F

HERE = os.path.dirname(__file__)
FIXTURES = os.path.join(HERE, "..", "fixtures", "bin")

#: The metadata of an argument: a global buffer (8 bytes) or a by-value dword.
GLOBAL = "{ .size: 8, .offset: OFFSET, .value_kind: global_buffer, .address_space: global }"
VALUE = "{ .size: 4, .offset: OFFSET, .value_kind: by_value }"


def kpatch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kpatch", *args], capture_output=True, text=True, timeout=300)


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def assemble(tmp_path, name: str, text: str | None = None) -> str:
    """clang-15's code object of tests/emulate/data/NAME.s, or of ``text``."""
    if shutil.which("clang-15") is None:
        pytest.skip("clang-15 not installed")
    src = os.path.join(HERE, "data", f"{name}.s")
    if text is not None:
        src = str(tmp_path / f"{name}.s")
        with open(src, "w") as f:
            f.write(text)
    out = str(tmp_path / f"{name}.hsaco")
    subprocess.run(["clang-15", "-x", "assembler", "-target", "amdgcn-amd-amdhsa", "-mcpu=gfx1030",
                    "-mcode-object-version=4", src, "-o", out], check=True)
    return out


def kernel(name: str, body: str, args: tuple[str, ...] = (), vgprs: int = 4, sgprs: int = 8, lds: int = 0,
           scratch: int = 0, descriptor: str = "") -> str:
    """The source of a wave32 code object with one kernel ``name``: ``body``
    (lines of assembly) then ``s_endpgm``; ``args`` in order, each
    :data:`GLOBAL`, :data:`VALUE` or such a line (``OFFSET`` is set to where
    it lies: each at the next multiple of its size); ``vgprs``/``sgprs``
    allocated, ``lds`` bytes of LDS and ``scratch`` bytes of private memory
    per lane; ``descriptor``: more ``.amdhsa_`` lines (user SGPRs the kernel
    takes besides the kernarg segment pointer)."""
    offset, lines = 0, []
    for a in args:
        size = int(a.split(".size:")[1].split(",")[0])
        offset = -(-offset // size) * size
        lines.append(f"      - {a.replace('OFFSET', str(offset))}\n")
        offset += size
    more = descriptor
    if lds:
        more += f"    .amdhsa_group_segment_fixed_size {lds}\n"
    if scratch:
        more += f"    .amdhsa_private_segment_fixed_size {scratch}\n"
    return f"""
.amdgcn_target "amdgcn-amd-amdhsa--gfx1030"
.text
.globl {name}
.p2align 8
.type {name},@function
{name}:
{body.rstrip(chr(10))}
    s_endpgm
.L{name}_end:
    .size {name}, .L{name}_end - {name}

.rodata
.p2align 6
.amdhsa_kernel {name}
    .amdhsa_user_sgpr_kernarg_segment_ptr 1
{more}    .amdhsa_next_free_vgpr {vgprs}
    .amdhsa_next_free_sgpr {sgprs}
    .amdhsa_wavefront_size32 1
.end_amdhsa_kernel

.amdgpu_metadata
---
amdhsa.version: [ 1, 1 ]
amdhsa.kernels:
  - .name: {name}
    .symbol: {name}.kd
    .kernarg_segment_size: {offset}
    .group_segment_fixed_size: {lds}
    .private_segment_fixed_size: {scratch}
    .kernarg_segment_align: 8
    .wavefront_size: 32
    .sgpr_count: {sgprs}
    .vgpr_count: {vgprs}
    .max_flat_workgroup_size: 32
    .args:{"" if lines else " []"}
{"".join(lines)}...
.end_amdgpu_metadata
"""



def mutate(data: bytes, kernel: str, pick, change, target: str = "gfx1010") -> bytes:
    """``data`` with the first instruction of ``kernel`` that ``pick`` accepts
    replaced by ``change(instruction)`` (same length)."""
    co = CodeObject.from_bytes(data)
    k = co.kernel(kernel)
    insts = decode(co.data[k.code_offset:k.code_offset + k.code_size], target, base_address=k.entry)
    inst = next(i for i in insts if pick(i))
    new = change(inst)
    assert len(new) == inst.size and new != inst.raw
    off = k.code_offset + (inst.address - k.entry)
    return data[:off] + new + data[off + len(new):]


def with_field(inst, fmt: F.Format, name: str, value: int) -> bytes:
    word = int.from_bytes(inst.raw[:fmt.size], "little")
    return fmt.field(name).put(word, value).to_bytes(fmt.size, "little") + inst.raw[fmt.size:]
