"""Shared helpers of the ISA tests: llvm-objdump-16 as the oracle."""

from __future__ import annotations

import os
import re
import subprocess

from elftools.elf.elffile import ELFFile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "bin")
ROCRAND = os.path.join(ROOT, "kdb_cache", "root", "usr", "lib", "x86_64-linux-gnu", "librocrand.so.1.1")
KNOWN_DIFFERENCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "known_differences.txt")

LINE = re.compile(r"^\t(.*?)\s*// ([0-9A-F]{12}): ([0-9A-F]{8}(?: [0-9A-F]{8})*)")


def objdump(path: str, cpu: str) -> list[tuple[int, str, int]]:
    """[(address, text, size)] of every instruction llvm-objdump-16 -d prints."""
    out = subprocess.run(["llvm-objdump-16", "-d", "--mcpu=" + cpu, path],
                         capture_output=True, text=True, check=True).stdout
    res = []
    for line in out.splitlines():
        m = LINE.match(line)
        if m:
            res.append((int(m.group(2), 16), m.group(1), len(m.group(3).replace(" ", "")) // 2))
    return res


def text_section(path: str) -> tuple[bytes, int, list[int]]:
    """(.text bytes, its address, addresses of the symbols in it)."""
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        idx = None
        for i, sec in enumerate(elf.iter_sections()):
            if sec.name == ".text":
                idx = i
                text = sec
                break
        data = text.data()
        addr = text["sh_addr"]
        syms = []
        st = elf.get_section_by_name(".symtab")
        if st is not None:
            for s in st.iter_symbols():
                if s["st_shndx"] == idx and s["st_info"]["type"] not in ("STT_SECTION", "STT_FILE"):
                    syms.append(s["st_value"])
    return data, addr, syms


def target_of(path: str) -> str:
    m = re.search(r"gfx10[13]0", os.path.basename(path))
    return m.group(0) if m else "gfx1030"


def extract_bundle_entry(host_path: str, triple_suffix: str, out_path: str) -> None:
    """Write one code object of a host library's .hip_fatbin bundle to ``out_path``."""
    with open(host_path, "rb") as fh:
        elf = ELFFile(fh)
        sec = elf.get_section_by_name(".hip_fatbin")
        blob = sec.data()
    fat = out_path + ".fatbin"
    with open(fat, "wb") as fh:
        fh.write(blob)
    subprocess.run(["/usr/lib/llvm-15/bin/clang-offload-bundler", "--unbundle", "--type=o",
                    "--input=" + fat, "--targets=hipv4-amdgcn-amd-amdhsa--" + triple_suffix,
                    "--output=" + out_path], check=True)


def _known_lines():
    if not os.path.exists(KNOWN_DIFFERENCES):
        return
    with open(KNOWN_DIFFERENCES) as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#"):
                yield line


def load_known_differences() -> dict[tuple[str, int], str]:
    """(file basename, address) -> reason, from known_differences.txt."""
    res = {}
    for line in _known_lines():
        if line.startswith("random "):
            continue
        name, addr, reason = line.split(None, 2)
        res[(name, int(addr, 16))] = reason
    return res


def load_random_classes() -> list[tuple[str, re.Pattern, str]]:
    """(format, pattern on LLVM's text, reason) of the difference classes
    known_differences.txt allows in tests/isa/test_random_llvm.py."""
    res = []
    for line in _known_lines():
        if line.startswith("random "):
            _, fmt, pat, reason = line.split(None, 3)
            res.append((fmt, re.compile(pat), reason))
    return res


_ENC = re.compile(r"encoding: \[([^\]]*)\]")


def mc_encode(lines: list[str], cpu: str) -> list[bytes | None]:
    """llvm-mc-16's encoding of each assembly line (None if it rejects it)."""
    src = "\n".join(lines) + "\n"
    p = subprocess.run(["llvm-mc-16", "-triple=amdgcn-amd-amdhsa", "-mcpu=" + cpu, "-show-encoding"],
                       input=src, capture_output=True, text=True)
    bad = {int(m.group(1)) for m in re.finditer(r"<stdin>:(\d+):\d+: error", p.stderr)}
    encs = [m.group(1) for m in _ENC.finditer(p.stdout)]
    out: list[bytes | None] = []
    k = 0
    for i in range(len(lines)):
        if i + 1 in bad:
            out.append(None)
        else:
            out.append(bytes(int(x, 16) for x in encs[k].split(",")))
            k += 1
    return out
