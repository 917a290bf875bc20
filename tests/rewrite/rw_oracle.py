"""An independent check of rewritten code objects, built on LLVM's tools only.

Nothing here imports kpatch.rewrite (or kpatch's decoder): instructions come
from ``llvm-objdump-16 -d``, sections and symbols from ``llvm-readelf-16``,
descriptor bytes straight from the file.  :func:`align` matches the old and
new instruction streams function by function (by mnemonic and operands,
skipping the marker instructions a test inserted and the ``s_nop 0`` the
Offset3fBug fix puts right after a branch) and :func:`check_rewrite` then
verifies that every branch, call, getpc literal, kernel descriptor and
function symbol points at the same place as before (or at the code inserted
in front of it).
"""

from __future__ import annotations

import bisect
import functools
import os
import re
import struct
import subprocess
from dataclasses import dataclass, field

OBJDUMP = "llvm-objdump-16"
READELF = "llvm-readelf-16"

_LINE = re.compile(r"^\t(?P<text>.*?)\s*// (?P<addr>[0-9A-F]+): (?P<enc>[0-9A-F ]+?)(?:\s+<.*>)?$")
_BRANCH = re.compile(r"^(s_branch|s_cbranch_\w+|s_call_b64 s\[\d+:\d+\],) ?(\d+)$")


@dataclass
class Line:
    addr: int
    text: str
    words: list[int]

    @property
    def mnemonic(self) -> str:
        return self.text.split(" ", 1)[0]

    @property
    def size(self) -> int:
        return 4 * len(self.words)


def objdump(path: str) -> list[Line]:
    """Every instruction line of .text, as llvm-objdump-16 prints it for gfx1030
    (cached per file version: the inputs are read many times)."""
    st = os.stat(path)
    return list(_objdump(path, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=16)
def _objdump(path: str, _mtime: int, _size: int) -> tuple[Line, ...]:
    out = subprocess.run([OBJDUMP, "-d", "--mcpu=gfx1030", path], capture_output=True,
                         text=True, check=True).stdout
    lines = []
    for raw in out.splitlines():
        m = _LINE.match(raw)
        if m:
            lines.append(Line(int(m["addr"], 16), m["text"].strip(),
                              [int(w, 16) for w in m["enc"].split()]))
    return tuple(lines)


def readelf(path: str, *args: str) -> tuple[str, str]:
    p = subprocess.run([READELF, *args, path], capture_output=True, text=True)
    return p.stdout, p.stderr


@dataclass
class Sym:
    name: str
    value: int
    size: int
    type: str


@dataclass
class Sec:
    name: str
    addr: int
    offset: int
    size: int


def sections(path: str) -> dict[str, Sec]:
    out, _ = readelf(path, "-S", "--wide")
    secs = {}
    for m in re.finditer(r"\]\s+(\S+)\s+\S+\s+([0-9a-f]{16}) ([0-9a-f]+) ([0-9a-f]+)", out):
        secs[m[1]] = Sec(m[1], int(m[2], 16), int(m[3], 16), int(m[4], 16))
    return secs


def symbols(path: str, table: str = ".symtab") -> list[Sym]:
    out, _ = readelf(path, "-s", "--wide")
    syms = []
    part = out.split(f"Symbol table '{table}'")
    if len(part) < 2:
        return syms
    for line in part[1].split("Symbol table")[0].splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].endswith(":") and f[0][:-1].isdigit():
            syms.append(Sym(f[7], int(f[1], 16), int(f[2], 0) if not f[2].startswith("0x")
                            else int(f[2], 16), f[3]))
    return syms


def _sext(v: int, bits: int) -> int:
    return v - (1 << bits) if v & (1 << (bits - 1)) else v


def branch_target(line: Line) -> int | None:
    m = _BRANCH.match(line.text)
    if not m:
        return None
    return line.addr + 4 + 4 * _sext(int(m[2]), 16)


@dataclass
class Alignment:
    map: dict[int, int] = field(default_factory=dict)  # old addr -> new addr of the instruction
    landing: dict[int, int] = field(default_factory=dict)  # old addr -> first marker before it
    after_nops: dict[int, int] = field(default_factory=dict)  # old branch addr -> s_nop 0 after it
    func_end: dict[str, int] = field(default_factory=dict)  # new end of each function's code
    problems: list[str] = field(default_factory=list)


def _same(o: Line, n: Line) -> bool:
    """Same instruction, up to what relocation may change (branch offsets, literals)."""
    if o.mnemonic != n.mnemonic:
        return False
    if branch_target(o) is not None:
        return True
    if o.mnemonic in ("s_add_u32", "s_addc_u32"):
        return o.text.split(",")[:2] == n.text.split(",")[:2]
    return o.text == n.text


def _in_range(lines: list[Line], starts: list[int], lo: int, hi: int) -> list[Line]:
    return lines[bisect.bisect_left(starts, lo):bisect.bisect_left(starts, hi)]


def align(old: list[Line], new: list[Line], old_funcs: list[Sym], new_funcs: list[Sym],
          markers: set[str], landing_markers: set[str] | None = None) -> Alignment:
    """Match each old function's instructions with the new function's of the same name.

    ``markers``: texts of inserted instructions to skip; a branch to an old
    instruction must land on the first of the ``landing_markers`` (default:
    all markers) right in front of it, else on the instruction itself.
    """
    landing_markers = markers if landing_markers is None else landing_markers
    res = Alignment()
    newf = {f.name: f for f in new_funcs}
    old = sorted(old, key=lambda x: x.addr)
    new = sorted(new, key=lambda x: x.addr)
    ostarts, nstarts = [x.addr for x in old], [x.addr for x in new]
    for f in old_funcs:
        g = newf.get(f.name)
        if g is None:
            res.problems.append(f"{f.name} is missing from the new object")
            continue
        o = _in_range(old, ostarts, f.value, f.value + f.size)
        n = _in_range(new, nstarts, g.value, g.value + g.size)
        j = 0
        run_start = None
        for k, ol in enumerate(o):
            while j < len(n) and n[j].text in markers:
                if run_start is None and n[j].text in landing_markers:
                    run_start = n[j].addr
                j += 1
            if j >= len(n):
                res.problems.append(f"{f.name}: new code ends before old {ol.addr:#x} {ol.text}")
                break
            if not _same(ol, n[j]):
                res.problems.append(f"{f.name}: old {ol.addr:#x} '{ol.text}' vs new "
                                    f"{n[j].addr:#x} '{n[j].text}'")
                break
            res.map[ol.addr] = n[j].addr
            res.landing[ol.addr] = run_start if run_start is not None else n[j].addr
            run_start = None
            j += 1
            if branch_target(ol) is not None and not ol.mnemonic.startswith("s_call"):
                nxt = o[k + 1].text if k + 1 < len(o) else None
                extra = 0
                while j < len(n) and n[j].text == "s_nop 0" and nxt != "s_nop 0":
                    extra += 1
                    j += 1
                if extra:
                    res.after_nops[ol.addr] = extra
        while j < len(n) and n[j].text in markers:  # insert_after the last instruction
            j += 1
        if j != len(n):
            res.problems.append(f"{f.name}: {len(n) - j} new instructions left over at "
                                f"{n[j].addr:#x} ({n[j].text})")
        res.func_end[f.name] = n[j - 1].addr + n[j - 1].size if j else g.value
    return res


def getpc_targets(lines: list[Line], markers: set[str] = frozenset()) -> dict[int, int]:
    """s_getpc_b64 address -> address its s_add_u32/s_addc_u32 pair computes
    (marker instructions a test inserted in between are skipped)."""
    lines = [x for x in lines if x.text not in markers]
    out = {}
    for a, b, c in zip(lines, lines[1:], lines[2:]):
        if a.mnemonic == "s_getpc_b64" and b.mnemonic == "s_add_u32" and c.mnemonic == "s_addc_u32":
            lo = b.words[1]
            hi = c.words[1] if len(c.words) > 1 else None
            if hi is None:
                continue
            out[a.addr] = a.addr + 4 + _sext((hi << 32) | lo, 64)
    return out


def descriptor_entries(path: str) -> dict[str, int]:
    """Kernel name -> entry address, from NAME.kd's value and the bytes of its descriptor."""
    data = open(path, "rb").read()
    secs = sections(path)
    out = {}
    for s in symbols(path, ".dynsym"):
        if not s.name.endswith(".kd"):
            continue
        sec = next(x for x in secs.values() if x.addr <= s.value < x.addr + x.size)
        at = sec.offset + (s.value - sec.addr)
        (off,) = struct.unpack_from("<q", data, at + 16)
        out[s.name[:-3]] = s.value + off
    return out


def section_of(secs: dict[str, Sec], addr: int) -> Sec | None:
    for s in secs.values():
        if s.addr and s.addr <= addr < s.addr + s.size:
            return s
    return None


def check_rewrite(old_path: str, new_path: str, markers: set[str] = frozenset(),
                  landing_markers: set[str] | None = None) -> Alignment:
    """Everything that must hold between an object and its rewrite; returns the
    alignment with ``problems`` listing every violation (see :func:`align`)."""
    old, new = objdump(old_path), objdump(new_path)
    out, err = readelf(new_path, "-a", "--wide")
    al = Alignment()
    if err.strip() or "warning" in out.lower():
        al.problems.append(f"llvm-readelf warns: {err.strip()[:300]}")
    ofuncs = [s for s in symbols(old_path) if s.type == "FUNC" and s.size]
    nfuncs = [s for s in symbols(new_path) if s.type == "FUNC" and s.size]
    res = align(old, new, ofuncs, nfuncs, markers, landing_markers)
    res.problems = al.problems + res.problems
    if any("<unknown>" in x.text for x in new):
        res.problems.append("llvm-objdump prints <unknown> in the new object")
    # branches: same target, or the markers in front of it
    new_at = {x.addr: x for x in new}
    for o in old:
        t = branch_target(o)
        if t is None or o.addr not in res.map:
            continue
        n = new_at[res.map[o.addr]]
        nt = branch_target(n)
        want = res.landing.get(t)
        if want is None:
            res.problems.append(f"branch at {o.addr:#x} targets {t:#x}, which was not aligned")
        elif nt != want:
            res.problems.append(f"branch {o.text} at {o.addr:#x} -> {t:#x}: new {n.text} at "
                                f"{n.addr:#x} -> {nt}, expected {want:#x}")
    # Offset3fBug: no branch offset 63 that relocation created, and each fix lands right
    old_text = {o.addr: o.text for o in old}
    inv = {v: k for k, v in res.map.items()}
    for n in new:
        if branch_target(n) is None or n.mnemonic.startswith("s_call"):
            continue
        simm = int(n.text.rsplit(" ", 1)[1])
        if simm == 63 and n.addr in inv and old_text[inv[n.addr]] != n.text:
            res.problems.append(f"relocation gave {n.text} at {n.addr:#x} offset 0x3f")
    # getpc literals
    osecs, nsecs = sections(old_path), sections(new_path)
    otext = osecs[".text"]
    new_targets = getpc_targets(new, markers)
    for a, t in getpc_targets(old).items():
        if a not in res.map:
            continue
        got = new_targets.get(res.map[a])
        if otext.addr <= t < otext.addr + otext.size:
            want = res.landing.get(t)
        else:
            s = section_of(osecs, t)
            want = None if s is None else t - s.addr + nsecs[s.name].addr
        if got != want:
            res.problems.append(f"getpc at {a:#x} -> {t:#x}: new -> {got}, expected {want}")
    # descriptors and function symbols
    oent, nent = descriptor_entries(old_path), descriptor_entries(new_path)
    nf = {s.name: s for s in nfuncs}
    for name, e in oent.items():
        want = res.landing.get(e)
        if nent.get(name) != want:
            res.problems.append(f"descriptor of {name}: entry {nent.get(name)}, expected {want}")
        if name in nf and nf[name].value != want:
            res.problems.append(f"symbol {name} = {nf[name].value:#x}, expected {want}")
    for f in ofuncs:
        g = nf.get(f.name)
        if g is None:
            continue
        if f.value in res.landing and g.value != res.landing[f.value]:
            res.problems.append(f"symbol {f.name} = {g.value:#x}, expected {res.landing[f.value]:#x}")
        end = res.func_end.get(f.name)
        if end is not None and g.value + g.size != end:
            res.problems.append(f"symbol {f.name} ends at {g.value + g.size:#x}, code ends {end:#x}")
    return res


def load_with_pyelftools(path: str) -> int:
    """Walk every section, segment, symbol and note with pyelftools; returns the symbol count."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import NoteSection, SymbolTableSection
    n = 0
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for seg in elf.iter_segments():
            seg.data()
        for sec in elf.iter_sections():
            sec.data()
            if isinstance(sec, SymbolTableSection):
                n += sum(1 for _ in sec.iter_symbols())
            if isinstance(sec, NoteSection):
                for _ in sec.iter_notes():
                    pass
    return n
