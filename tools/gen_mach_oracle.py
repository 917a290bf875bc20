#!/usr/bin/env python3
"""Write tests/codeobject/data/readelf_mach_oracle.json: what LLVM's tools say
about AMDGPU ``e_flags``.

Two independent sources, neither of which uses kpatch:

* ``headers``: a bare 64-byte ELF header (EM_AMDGPU, OS/ABI AMDGPU_HSA) for
  each EI_ABIVERSION / ``e_flags`` combination below, read back with
  ``llvm-readobj-16 -h`` (it names every flag: ``EF_AMDGPU_MACH_AMDGCN_GFX1030``,
  ``EF_AMDGPU_FEATURE_XNACK_ON_V4``...) and ``llvm-readelf-19 -h`` (it prints
  ``0x73F, gfx90a, xnack+, sramecc``).  ``llvm-readelf-16 -h`` prints only the
  hex value, so it is not used.  Combinations: every mach value 0x00..0xff
  with no feature bits at ABI versions 2 (V4) and 4 (V6); for every mach value
  either tool knows, the V2/V3 on/off bits, every V4/V6 xnack x sramecc field
  combination, and V6 generic versions.
* ``processors``: for every ``gfx*`` processor ``llvm-mc-16`` / ``llvm-mc-19``
  know, the ``e_flags`` they write for an empty object at code object V3 and
  V4 (and V6 for LLVM 19), i.e. the processor's mach value and which target
  features it supports (they come out as "any").

Mach values that neither LLVM 16 nor LLVM 19 knows (added in later LLVM) are
simply absent from the names in the oracle; the tests check the kpatch table
against every value the tools do know.

Run from the repository root: ``python3 tools/gen_mach_oracle.py``.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

READOBJ16 = "llvm-readobj-16"
READELF19 = "llvm-readelf-19"
MC16 = "llvm-mc-16"
MC19 = "/usr/lib/llvm-19/bin/llvm-mc"
OUT = Path("tests/codeobject/data/readelf_mach_oracle.json")
EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
BATCH = 400


def header(abi_version: int, e_flags: int) -> bytes:
    """A valid ELF64 LE header with no sections or segments."""
    ident = b"\x7fELF" + bytes([2, 1, 1, ELFOSABI_AMDGPU_HSA, abi_version]) + bytes(7)
    return ident + struct.pack("<HHIQQQIHHHHHH", 3, EM_AMDGPU, 1, 0, 0, 0, e_flags,
                               64, 0, 0, 0, 0, 0)


def run_batch(tool: list[str], files: list[str]) -> str:
    out = subprocess.run(tool + files, capture_output=True, text=True, check=False)
    return out.stdout


def readobj_flags(text: str) -> dict[str, list[str]]:
    """File name -> flag names, from ``llvm-readobj -h`` output for many files."""
    result: dict[str, list[str]] = {}
    for block in text.split("File: ")[1:]:
        name = block.split("\n", 1)[0].strip()
        m = re.search(r"Flags \[ \(0x[0-9A-Fa-f]+\)\n(.*?)\n\s*\]", block, re.S)
        names = re.findall(r"(EF_AMDGPU_\w+)", m.group(1)) if m else []
        result[name] = sorted(names)
    return result


def readelf_flags(text: str) -> dict[str, str]:
    """File name -> the ``Flags:`` value of ``llvm-readelf -h`` for many files."""
    result: dict[str, str] = {}
    for block in text.split("File: ")[1:]:
        name = block.split("\n", 1)[0].strip()
        m = re.search(r"^\s*Flags:\s*(.*)$", block, re.M)
        result[name] = m.group(1).strip() if m else ""
    return result


def read_headers(cases: list[tuple[int, int]], tmp: str) -> list[dict]:
    files = []
    for abi, flags in cases:
        path = os.path.join(tmp, f"h_{abi}_{flags:08x}.o")
        with open(path, "wb") as f:
            f.write(header(abi, flags))
        files.append(path)
    names16: dict[str, list[str]] = {}
    text19: dict[str, str] = {}
    for i in range(0, len(files), BATCH):
        chunk = files[i:i + BATCH]
        names16.update(readobj_flags(run_batch([READOBJ16, "-h"], chunk)))
        text19.update(readelf_flags(run_batch([READELF19, "-h"], chunk)))
    return [{"abi_version": abi, "e_flags": flags, "readobj16": names16.get(path, []),
             "readelf19": text19.get(path, "")}
            for (abi, flags), path in zip(cases, files)]


def processors(mc: str) -> list[str]:
    out = subprocess.run([mc, "-triple=amdgcn-amd-amdhsa", "-mcpu=help"],
                         capture_output=True, text=True, check=False)
    names = re.findall(r"^\s+(gfx[0-9a-z-]+)\s+- Select", out.stdout + out.stderr, re.M)
    return sorted(set(names))


def default_flags(mc: str, cpu: str, version: int, tmp: str) -> int | None:
    path = os.path.join(tmp, "mc.o")
    r = subprocess.run([mc, "-triple=amdgcn-amd-amdhsa", f"-mcpu={cpu}",
                        f"--amdhsa-code-object-version={version}", "-filetype=obj", "-o", path],
                       input="", capture_output=True, text=True, check=False)
    if r.returncode != 0:
        return None
    with open(path, "rb") as f:
        data = f.read(64)
    return struct.unpack_from("<I", data, 48)[0]


def dump(doc: dict) -> str:
    """JSON with one header / processor per line (small, diff-friendly)."""
    lines = ["{"]
    lines.append(f'"generated_by": {json.dumps(doc["generated_by"])},')
    lines.append(f'"tools": {json.dumps(doc["tools"], sort_keys=True)},')
    lines.append('"header_fields": ["abi_version", "e_flags", "readobj16", "readelf19"],')
    lines.append('"headers": [')
    rows = [json.dumps([h["abi_version"], h["e_flags"], h["readobj16"], h["readelf19"]])
            for h in doc["headers"]]
    lines.append(",\n".join(rows))
    lines.append("],")
    lines.append('"processors": {')
    tags = []
    for tag, procs in doc["processors"].items():
        body = ",\n".join(f"{json.dumps(cpu)}: {json.dumps(flags, sort_keys=True)}"
                          for cpu, flags in procs.items())
        tags.append(f"{json.dumps(tag)}: {{\n{body}\n}}")
    lines.append(",\n".join(tags))
    lines.append("}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        base = [(abi, mach) for abi in (2, 4) for mach in range(0x100)]
        first = read_headers(base, tmp)
        known = sorted({h["e_flags"] for h in first if h["e_flags"] >= 0x20 and (
            any(n.startswith("EF_AMDGPU_MACH_AMDGCN") for n in h["readobj16"])
            or "," in h["readelf19"])})
        combos: list[tuple[int, int]] = []
        for mach in known:
            combos += [(0, mach), (0, mach | 0x1), (0, mach | 0x100)]
            combos += [(1, mach | bits) for bits in (0x100, 0x200, 0x300)]
            combos += [(2, mach | x | s) for x in (0, 0x100, 0x200, 0x300)
                       for s in (0, 0x400, 0x800, 0xC00) if x or s]
            combos += [(3, mach | bits) for bits in (0x100, 0x200, 0x300, 0x400, 0x800, 0xC00)]
            combos += [(4, mach | x | s) for x in (0, 0x100, 0x200, 0x300)
                       for s in (0, 0x400, 0x800, 0xC00) if x or s]
            combos += [(4, mach | (v << 24)) for v in (1, 2, 0xFF)]
        headers = first + read_headers(combos, tmp)
        procs = {}
        for tag, mc, versions in (("llvm16", MC16, (3, 4)), ("llvm19", MC19, (3, 4, 6))):
            procs[tag] = {cpu: {f"v{v}": default_flags(mc, cpu, v, tmp) for v in versions}
                          for cpu in processors(mc)}
    versions = {t: subprocess.run([t, "--version"], capture_output=True, text=True).stdout
                .strip().splitlines()[0:2] for t in (READOBJ16, READELF19)}
    doc = {
        "generated_by": "tools/gen_mach_oracle.py",
        "tools": versions,
        "headers": headers,
        "processors": procs,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w") as f:
        f.write(dump(doc))
    print(f"wrote {OUT}: {len(headers)} headers, "
          + ", ".join(f"{k}: {len(v)} processors" for k, v in procs.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
