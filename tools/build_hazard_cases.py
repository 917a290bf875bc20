#!/usr/bin/env python3
"""Build the gfx1010 hazard cases: code objects plus their expected findings.

Inputs (tests/fixtures/hazards/):
  src/*.s       hand-written kernels, one per case, annotated (syntax below)
  src/kernel.inc  the KERNEL / END_KERNEL macros the sources use
  mir/*.mir     MIR mirrors of the main hazard cases for LLVM's own recognizer
Outputs:
  bin/*.hsaco   the assembled code objects (clang-15 -x assembler, linked)
  cases.json    per case: object, kernel, class, expected count and addresses,
                why, and what LLVM's tools said about it

Annotations in a source file (comment lines):
  // BUILD <object> <mcpu>     assemble the file as bin/<object>.hsaco for
                               <mcpu> (may repeat); default: one object
                               <stem>.gfx1030 for gfx1030
  // CASE <name> key=value ...  a case; keys:
       class=    finding class (see CLASSES)
       expect=   number of findings of that class in the kernel
       at=       comma list of labels (short name x = .L<kernel>_x, or a full
                 .L label) of the instructions the findings are reported at,
                 or ".kd" for a finding at the kernel descriptor
       also=     other classes expected in the same kernel: Class:lab,lab;...
       level=    instruction (default) | kernel | code_object
       mir=      name of the MIR function mirroring the case (mir/*.mir)
       llvm16=   "differs": LLVM 16's recognizer is known to disagree (the
                 case follows the field semantics of newer LLVM and the notes)
       object=   the BUILD object holding the case (files with several BUILDs)
       kernel=   the kernel (default: the case name)
  // WHY <text>                 explanation of the case (appended to the last CASE)
Every class not listed for a kernel (class= and also=) is expected to have
zero findings in it.

Where expectations come from: the construction of each case, following the
reference notes and LLVM's GCNHazardRecognizer, never kpatch.  Independent
LLVM checks recorded as "llvm_confirms":
  - mir=: llc-16 -mcpu=gfx1010 -run-pass post-RA-hazard-rec inserts the class's
    mitigation exactly before the "; AT" instructions and nowhere else;
    -mcpu=gfx1030 inserts nothing;
  - Offset3fBug: llvm-mc-16 -mcpu=gfx1010 relaxes exactly the expected branches
    (simm16 0x3f -> 0x40 plus s_nop 0) and leaves the other kernels unchanged;
  - UnsupportedInstruction / OpcodeReuse: llvm-mc-16 -mcpu=gfx1010 rejects
    exactly `expect` instructions of the kernel; for OpcodeReuse,
    llvm-objdump-16 --mcpu=gfx1010 decodes the bytes as another instruction.
A disagreement stops the build (exit status 1).

Usage: tools/build_hazard_cases.py [--check]
  --check   rebuild into a scratch directory and compare with the committed
            bin/ and cases.json instead of replacing them
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HAZ = ROOT / "tests" / "fixtures" / "hazards"
SRC = HAZ / "src"
MIRDIR = HAZ / "mir"
BIN = HAZ / "bin"
CASES_JSON = HAZ / "cases.json"

CLANG = "clang-15"
MC = "llvm-mc-16"
LLC = "llc-16"
OBJDUMP = "llvm-objdump-16"
READELF = "llvm-readelf-16"
OBJCOPY = "llvm-objcopy-16"
TOOLS = (CLANG, MC, LLC, OBJDUMP, READELF, OBJCOPY)

CLASSES = (
    "UnsupportedInstruction", "OpcodeReuse", "InstFwdPrefetchBug",
    "VMEMtoScalarWriteHazard", "SMEMtoVectorWriteHazard", "VcmpxPermlaneHazard",
    "VcmpxExecWARHazard", "LdsBranchVmemWARHazard", "NSAtoVMEMBug", "NSAClauseBug",
    "NSAMaxSize", "Offset3fBug", "FlatSegmentOffsetBug",
    "NegativeUnalignedScratchOffsetBug", "LdsMisalignedBug", "VsharpLlcNoalloc", "Xnack",
)
LEVELS = ("instruction", "kernel", "code_object")

# The mitigation LLVM's post-RA hazard recognizer inserts, per class, as the
# text of the inserted MIR instruction (a regular expression).
MIR_MITIGATION = {
    "VMEMtoScalarWriteHazard": r"^S_WAITCNT_DEPCTR 65507$",
    "SMEMtoVectorWriteHazard": r"^\$sgpr_null = S_MOV_B32 0$",
    "VcmpxPermlaneHazard": r"^\$vgpr(\d+) = V_MOV_B32_e32 (killed )?\$vgpr\1, implicit \$exec$",
    "VcmpxExecWARHazard": r"^S_WAITCNT_DEPCTR 65534$",
    "LdsBranchVmemWARHazard": r"^S_WAITCNT_VSCNT undef \$sgpr_null, 0$",
    "NSAtoVMEMBug": r"^S_NOP 0$",
}

# Construction sanity checks: the mnemonic at each expected address.
AT_MNEMONIC = {
    "VMEMtoScalarWriteHazard": r"^s_",
    "SMEMtoVectorWriteHazard": r"^v_",
    "VcmpxPermlaneHazard": r"^v_permlanex?16_b32",
    "VcmpxExecWARHazard": r"^v_cmpx?_",
    "LdsBranchVmemWARHazard": r"^(ds|buffer|tbuffer|global|scratch|image)_",
    "NSAtoVMEMBug": r"^t?buffer_",
    "NSAClauseBug": r"^image_",
    "NSAMaxSize": r"^image_",
    "Offset3fBug": r"^s_(branch|cbranch_)",
    "InstFwdPrefetchBug": r"^s_inst_prefetch",
    "FlatSegmentOffsetBug": r"^flat_",
    "NegativeUnalignedScratchOffsetBug": r"^scratch_",
    "OpcodeReuse": r"^v_fmac?_legacy_f32",
    "VsharpLlcNoalloc": r"^s_mov_b32 s\d+, 0x",
}

CASE_RE = re.compile(r"^\s*//\s*CASE\s+(\w+)\s*(.*)$")
WHY_RE = re.compile(r"^\s*//\s*WHY\s+(.*)$")
BUILD_RE = re.compile(r"^\s*//\s*BUILD\s+(\S+)\s+(\S+)\s*$")
KERNEL_RE = re.compile(r"^\s*KERNEL\s+(\w+)\s*$")
END_RE = re.compile(r"^\s*END_KERNEL\s+(\w+)((?:\s*,\s*\d+)*)\s*$")
LABEL_RE = re.compile(r"^\s*(\.L\w+):")
INST_RE = re.compile(r"^\s+(\S.*?)\s*//\s*([0-9A-Fa-f]{12}):((?:\s+[0-9A-F]{8})+)\s*(?:<[^>]*>)?\s*$")


class BuildError(Exception):
    """A case, a tool run or an LLVM cross-check went wrong."""


def run(args: list[str], cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run a tool; on failure raise BuildError with its stderr."""
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise BuildError(f"{' '.join(args)} failed:\n{proc.stderr}")
    return proc


# ----------------------------------------------------------------- sources

@dataclass
class Kernel:
    """One KERNEL ... END_KERNEL block of a source file."""
    name: str
    body: list[str]
    wgp: int = 0
    lds: int = 0
    scratch: int = 0


@dataclass
class Case:
    """One CASE annotation."""
    name: str
    source: str
    params: dict[str, str]
    why: list[str] = field(default_factory=list)


@dataclass
class Source:
    """An annotated .s file."""
    path: Path
    text: str
    builds: list[tuple[str, str]]
    kernels: dict[str, Kernel]
    cases: list[Case]


def parse_source(path: Path) -> Source:
    """Read the annotations, kernels and builds of one source file."""
    text = path.read_text()
    builds: list[tuple[str, str]] = []
    kernels: dict[str, Kernel] = {}
    cases: list[Case] = []
    current: Kernel | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        where = f"{path.name}:{lineno}"
        if m := BUILD_RE.match(line):
            builds.append((m.group(1), m.group(2)))
        elif m := CASE_RE.match(line):
            params = {}
            for item in m.group(2).split():
                key, sep, value = item.partition("=")
                if not sep:
                    raise BuildError(f"{where}: bad CASE parameter {item!r}")
                params[key] = value
            cases.append(Case(m.group(1), path.name, params))
        elif m := WHY_RE.match(line):
            if not cases:
                raise BuildError(f"{where}: WHY before any CASE")
            cases[-1].why.append(m.group(1).strip())
        elif m := KERNEL_RE.match(line):
            if current is not None:
                raise BuildError(f"{where}: KERNEL inside kernel {current.name}")
            current = Kernel(m.group(1), [])
        elif m := END_RE.match(line):
            if current is None or current.name != m.group(1):
                raise BuildError(f"{where}: END_KERNEL {m.group(1)} does not close a kernel")
            nums = [int(x) for x in re.findall(r"\d+", m.group(2))]
            for attr, value in zip(("wgp", "lds", "scratch"), nums):
                setattr(current, attr, value)
            if current.name in kernels:
                raise BuildError(f"{where}: kernel {current.name} defined twice")
            kernels[current.name] = current
            current = None
        elif current is not None:
            current.body.append(line)
    if current is not None:
        raise BuildError(f"{path.name}: kernel {current.name} not closed")
    if not builds:
        builds = [(f"{path.stem}.gfx1030", "gfx1030")]
    return Source(path, text, builds, kernels, cases)


def metadata_block(kernels: list[Kernel], mcpu: str) -> str:
    """A code object V4 metadata note (YAML) for the kernels of one source."""
    lines = [".amdgpu_metadata", "---", "amdhsa.version: [ 1, 1 ]",
             f"amdhsa.target: amdgcn-amd-amdhsa--{mcpu}", "amdhsa.kernels:"]
    for k in kernels:
        lines += [f"  - .name: {k.name}", f"    .symbol: {k.name}.kd", "    .kind: normal",
                  "    .kernarg_segment_size: 0", "    .kernarg_segment_align: 4",
                  f"    .group_segment_fixed_size: {k.lds}",
                  f"    .private_segment_fixed_size: {k.scratch}", "    .wavefront_size: 32",
                  "    .sgpr_count: 32", "    .vgpr_count: 32",
                  "    .max_flat_workgroup_size: 256", "    .args: []"]
    lines += ["...", ".end_amdgpu_metadata", ""]
    return "\n".join(lines)


def with_label_symbols(text: str) -> str:
    """The source with a symbol __kp_X after every local label .LX (same code)."""
    out = []
    for line in text.splitlines():
        out.append(line)
        if m := LABEL_RE.match(line):
            out.append(f"__kp_{m.group(1)[2:]}:")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------- objects

@dataclass
class Instruction:
    """One instruction of llvm-objdump-16's disassembly."""
    address: int
    text: str
    words: list[int]


@dataclass
class BuiltObject:
    """An assembled code object and what LLVM's tools say about it."""
    name: str
    mcpu: str
    source: Source
    data: bytes
    symbols: dict[str, tuple[int, int, str]]
    insts: dict[int, Instruction]
    e_flags: int
    rodata: bytes
    rodata_addr: int


def assemble(text: str, mcpu: str, out: Path, work: Path) -> None:
    """Assemble and link one source text with clang-15 into a code object."""
    shutil.copy(SRC / "kernel.inc", work / "kernel.inc")
    (work / "case.s").write_text(text)
    run([CLANG, "-x", "assembler", "-target", "amdgcn-amd-amdhsa", f"-mcpu={mcpu}",
         "-mcode-object-version=4", "case.s", "-o", str(out)], cwd=work)


def dump_section(obj: Path, name: str, work: Path) -> bytes:
    """The bytes of one section, as llvm-objcopy-16 extracts them."""
    out = work / f"section{name}"
    run([OBJCOPY, f"--dump-section={name}={out}", str(obj), str(work / "discard.o")])
    return out.read_bytes()


def read_symbols(obj: Path) -> dict[str, tuple[int, int, str]]:
    """name -> (value, size, type) from llvm-readelf-16 -s (.symtab)."""
    syms = {}
    section = None
    for line in run([READELF, "-s", "--wide", str(obj)]).stdout.splitlines():
        if line.startswith("Symbol table"):
            section = ".symtab" if "'.symtab'" in line else "other"
            continue
        parts = line.split()
        if section == ".symtab" and len(parts) >= 8 and parts[0][:-1].isdigit():
            syms[parts[7]] = (int(parts[1], 16), int(parts[2]), parts[3])
    return syms


def disassemble(obj: Path, mcpu: str) -> dict[int, Instruction]:
    """address -> Instruction from llvm-objdump-16 -d."""
    insts = {}
    for line in run([OBJDUMP, "-d", f"--mcpu={mcpu}", str(obj)]).stdout.splitlines():
        if m := INST_RE.match(line):
            addr = int(m.group(2), 16)
            insts[addr] = Instruction(addr, " ".join(m.group(1).split()),
                                      [int(w, 16) for w in m.group(3).split()])
    return insts


def section_address(obj: Path, name: str) -> int:
    """Virtual address of a section, from llvm-readelf-16 -S."""
    for line in run([READELF, "-S", "--wide", str(obj)]).stdout.splitlines():
        parts = line.replace("[ ", "[").split()
        if len(parts) > 3 and parts[1] == name:
            return int(parts[3], 16)
    raise BuildError(f"{obj.name}: no section {name}")


def read_e_flags(obj: Path) -> int:
    """e_flags from llvm-readelf-16 -h."""
    for line in run([READELF, "-h", str(obj)]).stdout.splitlines():
        if line.strip().startswith("Flags:"):
            return int(line.split()[1].rstrip(","), 16)
    raise BuildError(f"{obj.name}: no Flags line")


def build_object(src: Source, name: str, mcpu: str, out_dir: Path, work: Path) -> BuiltObject:
    """Assemble one BUILD of a source, twice (with and without label symbols)."""
    kernels = list(src.kernels.values())
    clean = src.text + "\n" + metadata_block(kernels, mcpu)
    labelled = with_label_symbols(src.text) + "\n" + metadata_block(kernels, mcpu)
    obj = out_dir / f"{name}.hsaco"
    lab = work / f"{name}.labels.o"
    assemble(clean, mcpu, obj, work)
    assemble(labelled, mcpu, lab, work)
    for sec in (".text", ".rodata"):
        if dump_section(obj, sec, work) != dump_section(lab, sec, work):
            raise BuildError(f"{name}: label symbols changed {sec}")
    base_cpu = mcpu.split(":")[0]
    return BuiltObject(
        name=name, mcpu=mcpu, source=src, data=obj.read_bytes(), symbols=read_symbols(lab),
        insts=disassemble(obj, base_cpu), e_flags=read_e_flags(obj),
        rodata=dump_section(obj, ".rodata", work), rodata_addr=section_address(obj, ".rodata"))


# ----------------------------------------------------------------- LLVM oracles

def mir_functions(text: str) -> dict[str, list[tuple[str, bool]]]:
    """function name -> [(instruction text, marked AT)] from a MIR file."""
    funcs: dict[str, list[tuple[str, bool]]] = {}
    name = None
    in_body = False
    marked = False
    for line in text.splitlines():
        if m := re.match(r"^name:\s+(\S+)", line):
            name = m.group(1)
            funcs[name] = []
            in_body = False
            continue
        if line.startswith("body:"):
            in_body = True
            continue
        if line.startswith("...") or line.startswith("---"):
            in_body = False
            continue
        if not in_body or name is None:
            continue
        s = line.strip()
        if not s:
            continue
        if s == "; AT":
            marked = True
            continue
        if s.startswith(";") or s.startswith("#") or re.match(r"^bb\.\d+", s) or \
                s.startswith(("successors:", "liveins:")):
            continue
        funcs[name].append((s, marked))
        marked = False
    return funcs


def opcode(inst: str) -> str:
    """The opcode of a MIR instruction line."""
    rhs = inst.split(" = ", 1)[1] if " = " in inst else inst
    words = [w for w in rhs.split() if w not in ("renamable", "nofpexcept", "undef", "killed")]
    return words[0].rstrip(",") if words else ""


def mir_insertions(before: list[tuple[str, bool]], after: list[str]) -> list[tuple[int, str]]:
    """(index in `before` of the instruction each insertion precedes, inserted text)."""
    inserted = []
    i = 0
    for inst in after:
        if i < len(before) and opcode(inst) == opcode(before[i][0]):
            i += 1
        else:
            inserted.append((i, inst))
    if i != len(before):
        raise BuildError("MIR output lost instructions of the input")
    return inserted


def run_mir(path: Path, mcpu: str, work: Path) -> dict[str, list[str]]:
    """Run LLVM's post-RA hazard recognizer on a MIR file; instructions per function."""
    out = work / f"{path.stem}.{mcpu}.mir"
    run([LLC, "-march=amdgcn", f"-mcpu={mcpu}", "-run-pass", "post-RA-hazard-rec",
         "-o", str(out), str(path)])
    return {k: [s for s, _ in v] for k, v in mir_functions(out.read_text()).items()}


def mir_results(work: Path) -> dict[str, dict]:
    """Per MIR function: its AT positions and what llc-16 inserted for gfx1010/gfx1030."""
    results = {}
    for path in sorted(MIRDIR.glob("*.mir")):
        funcs = mir_functions(path.read_text())
        out10 = run_mir(path, "gfx1010", work)
        out30 = run_mir(path, "gfx1030", work)
        for name, insts in funcs.items():
            if name in results:
                raise BuildError(f"MIR function {name} defined twice")
            results[name] = {
                "file": path.name,
                "at": [i for i, (_, marked) in enumerate(insts) if marked],
                "gfx1010": mir_insertions(insts, out10[name]),
                "gfx1030": mir_insertions(insts, out30[name]),
                "insts": [s for s, _ in insts],
            }
    return results


def mc_errors(body: list[str], mcpu: str, work: Path) -> int:
    """Number of instructions llvm-mc-16 rejects in a kernel body for mcpu."""
    (work / "body.s").write_text("\n".join(body) + "\n")
    proc = run([MC, "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", "-filetype=obj",
                "-o", str(work / "body.o"), str(work / "body.s")], check=False)
    return sum(1 for line in proc.stderr.splitlines() if ": error:" in line)


def mc_object(body: list[str], mcpu: str, work: Path) -> tuple[bytes, dict[int, Instruction]]:
    """A kernel body assembled alone by llvm-mc-16: .text bytes and disassembly."""
    (work / "body.s").write_text("\n".join(body) + "\n")
    obj = work / f"body.{mcpu}.o"
    run([MC, "-triple=amdgcn-amd-amdhsa", f"-mcpu={mcpu}", "-filetype=obj", "-o", str(obj),
         str(work / "body.s")])
    return dump_section(obj, ".text", work), disassemble(obj, mcpu)


# ----------------------------------------------------------------- cases

def label_symbol(kernel: str, label: str) -> str:
    """The __kp_ symbol for an at= label."""
    full = label if label.startswith(".L") else f".L{kernel}_{label}"
    return "__kp_" + full[2:]


def resolve_case(case: Case, src: Source, objects: dict[str, BuiltObject]) -> dict:
    """Turn one CASE annotation into its cases.json record (no LLVM checks yet)."""
    p = case.params
    where = f"{case.source}: case {case.name}"
    cls = p.get("class")
    if cls not in CLASSES:
        raise BuildError(f"{where}: unknown class {cls!r}")
    expect = int(p.get("expect", "-1"))
    level = p.get("level", "instruction")
    if expect < 0 or level not in LEVELS:
        raise BuildError(f"{where}: bad expect/level")
    kname = p.get("kernel", case.name)
    if kname not in src.kernels:
        raise BuildError(f"{where}: no kernel {kname}")
    objname = p.get("object") or (src.builds[0][0] if len(src.builds) == 1 else None)
    if objname not in objects:
        raise BuildError(f"{where}: object {objname!r} is not a BUILD of {src.path.name}")
    obj = objects[objname]
    kaddr, ksize, ktype = obj.symbols[kname]
    kd = obj.symbols[kname + ".kd"][0]
    if ktype != "FUNC":
        raise BuildError(f"{where}: {kname} is not a function symbol")

    def addresses(labels: list[str], klass: str) -> list[int]:
        addrs = []
        for lab in labels:
            if lab == ".kd":
                addrs.append(kd)
                continue
            sym = label_symbol(kname, lab)
            if sym not in obj.symbols:
                raise BuildError(f"{where}: label {lab} not found")
            addr = obj.symbols[sym][0]
            if addr not in obj.insts or not kaddr <= addr < kaddr + ksize:
                raise BuildError(f"{where}: label {lab} is not an instruction of {kname}")
            if klass in AT_MNEMONIC and not re.match(AT_MNEMONIC[klass], obj.insts[addr].text):
                raise BuildError(f"{where}: {klass} at {obj.insts[addr].text!r}?")
            addrs.append(addr)
        return addrs

    at_labels = [x for x in p.get("at", "").split(",") if x]
    at = addresses(at_labels, cls)
    if level == "instruction" and len(at) != expect:
        raise BuildError(f"{where}: expect={expect} but {len(at)} at= labels")
    if level == "kernel" and at_labels not in ([".kd"] * expect, []) or \
            level == "kernel" and len(at) != expect:
        raise BuildError(f"{where}: kernel-level cases use at=.kd when expect=1")
    if level == "code_object" and at_labels:
        raise BuildError(f"{where}: code-object cases have no address")
    all_findings: dict[str, list[int]] = {}
    if expect:
        all_findings[cls] = at if level != "code_object" else []
    for part in filter(None, p.get("also", "").split(";")):
        klass, _, labs = part.partition(":")
        if klass not in CLASSES or klass == cls:
            raise BuildError(f"{where}: bad also= class {klass!r}")
        all_findings[klass] = addresses([x for x in labs.split(",") if x], klass)
    kd_off = kd - obj.rodata_addr
    rsrc1 = struct.unpack_from("<I", obj.rodata, kd_off + 48)[0]
    group = struct.unpack_from("<I", obj.rodata, kd_off)[0]
    kernel = src.kernels[kname]
    if (rsrc1 >> 29) & 1 != kernel.wgp or group != kernel.lds:
        raise BuildError(f"{where}: descriptor does not say wgp={kernel.wgp} lds={kernel.lds}")
    return {
        "name": case.name,
        "class": cls,
        "expect": expect,
        "level": level,
        "object": f"{objname}.hsaco",
        "kernel": kname,
        "kernel_address": kaddr,
        "kernel_size": ksize,
        "descriptor_address": kd,
        "at": at,
        "at_offsets": [a - kaddr for a in at] if level == "instruction" else [],
        "at_text": [obj.insts[a].text for a in at] if level == "instruction" else [],
        "all_findings": {k: all_findings[k] for k in sorted(all_findings)},
        "wgp_mode": kernel.wgp,
        "group_segment_size": kernel.lds,
        "why": " ".join(case.why),
        "source": f"src/{case.source}",
        "mir": p.get("mir"),
        "llvm_confirms": None,
        "llvm_check": None,
    }


def check_mir(rec: dict, case: Case, mir: dict) -> None:
    """Compare a case with what llc-16's hazard recognizer did to its MIR mirror."""
    name = rec["mir"]
    where = f"case {rec['name']} (MIR {name})"
    if name not in mir:
        raise BuildError(f"{where}: no such MIR function")
    res = mir[name]
    if res["gfx1030"]:
        raise BuildError(f"{where}: llc-16 -mcpu=gfx1030 inserted {res['gfx1030']}")
    cls = rec["class"]
    pattern = re.compile(MIR_MITIGATION[cls])
    got_pos = sorted(i for i, _ in res["gfx1010"])
    wrong = [t for _, t in res["gfx1010"] if not pattern.match(t)]
    expected_pos = sorted(res["at"]) if rec["expect"] else []
    if rec["expect"] and len(expected_pos) != rec["expect"]:
        raise BuildError(f"{where}: {len(expected_pos)} '; AT' marks, expect={rec['expect']}")
    agrees = not wrong and got_pos == expected_pos
    differs = case.params.get("llvm16") == "differs"
    inserted = "; ".join(f"{t!r} before #{i}" for i, t in res["gfx1010"]) or "nothing"
    rec["llvm_check"] = (f"llc-16 -mcpu=gfx1010 -run-pass post-RA-hazard-rec on "
                         f"mir/{res['file']}:{name} inserted {inserted}; -mcpu=gfx1030 nothing")
    if agrees and not differs:
        rec["llvm_confirms"] = True
    elif not agrees and differs:
        rec["llvm_confirms"] = False
        rec["llvm_check"] += (" -- LLVM 16 disagrees: it only accepts the exact mitigation "
                              "immediate; newer LLVM and the reference notes decode the field")
    else:
        raise BuildError(f"{where}: LLVM {'agrees' if agrees else 'disagrees'} "
                         f"(inserted {inserted}, AT marks {expected_pos})")


def check_offset3f(rec: dict, kernel: Kernel, work: Path) -> None:
    """Offset3fBug: compare the kernel assembled by llvm-mc-16 for gfx1030 and gfx1010."""
    text30, insts30 = mc_object(kernel.body, "gfx1030", work)
    text10, insts10 = mc_object(kernel.body, "gfx1010", work)
    branches30 = [i for i in insts30.values() if re.match(r"^s_(branch|cbranch_)", i.text)]
    simm3f = [i.address for i in branches30 if i.words[0] & 0xFFFF == 0x3F]
    if sorted(simm3f) != sorted(rec["at_offsets"]):
        raise BuildError(f"case {rec['name']}: branches with simm16 0x3f at {simm3f}, "
                         f"expected {rec['at_offsets']}")
    relaxed = [i.address for i in insts10.values()
               if re.match(r"^s_(branch|cbranch_)", i.text) and i.words[0] & 0xFFFF == 0x40
               and insts10.get(i.address + 4) is not None
               and insts10[i.address + 4].words == [0xBF800000]]
    grown = (len(text10) - len(text30)) // 4
    if rec["expect"]:
        ok = grown == rec["expect"] and all(a in relaxed for a in rec["at_offsets"])
    else:
        ok = text10 == text30
    if not ok:
        raise BuildError(f"case {rec['name']}: llvm-mc-16 gfx1010 relaxation disagrees "
                         f"(grew by {grown} dwords)")
    rec["llvm_confirms"] = True
    rec["llvm_check"] = (f"llvm-mc-16 -mcpu=gfx1010 on the kernel body: {grown} branch(es) "
                         "relaxed to simm16 0x40 + s_nop 0" if grown else
                         "llvm-mc-16 -mcpu=gfx1010 on the kernel body: same bytes as gfx1030")


def check_isa(rec: dict, kernel: Kernel, obj: BuiltObject, objpath: Path, work: Path) -> None:
    """Unsupported/OpcodeReuse: llvm-mc-16 gfx1010 rejections, objdump gfx1010 decoding."""
    errors = mc_errors(kernel.body, "gfx1010", work)
    if mc_errors(kernel.body, "gfx1030", work):
        raise BuildError(f"case {rec['name']}: gfx1030 rejects its own kernel")
    dec10 = disassemble(objpath, "gfx1010")
    rec["gfx1010_decodes_as"] = [dec10[a].text if a in dec10 else None for a in rec["at"]]
    ok = errors == rec["expect"]
    if rec["class"] == "OpcodeReuse":
        for a in rec["at"]:
            t10 = dec10.get(a)
            if t10 is None or t10.text.startswith((".long", "v_illegal")) or \
                    t10.text.split()[0] == obj.insts[a].text.split()[0]:
                ok = False
    if not ok:
        raise BuildError(f"case {rec['name']}: llvm-mc-16 gfx1010 rejected {errors} "
                         f"instruction(s), expected {rec['expect']}")
    rec["llvm_confirms"] = True
    rec["llvm_check"] = (f"llvm-mc-16 -mcpu=gfx1010 rejects {errors} instruction(s) of the "
                         "kernel body" + ("; llvm-objdump-16 --mcpu=gfx1010 decodes "
                                          f"{rec['gfx1010_decodes_as']}"
                                          if rec["class"] == "OpcodeReuse" else ""))


# ----------------------------------------------------------------- main

def build(out_bin: Path, work: Path) -> dict:
    """Build every object and case into out_bin; return the cases.json document."""
    sources = [parse_source(p) for p in sorted(SRC.glob("*.s"))]
    mir = mir_results(work)
    used_mir: set[str] = set()
    objects: dict[str, BuiltObject] = {}
    records = []
    for src in sources:
        objs = {}
        for name, mcpu in src.builds:
            if name in objects:
                raise BuildError(f"object {name} built twice")
            objs[name] = objects[name] = build_object(src, name, mcpu, out_bin, work)
        used_kernels = set()
        for case in src.cases:
            rec = resolve_case(case, src, objs)
            used_kernels.add(rec["kernel"])
            kernel = src.kernels[rec["kernel"]]
            obj = objs[rec["object"][:-len(".hsaco")]]
            if rec["mir"]:
                if rec["mir"] in used_mir:
                    raise BuildError(f"MIR function {rec['mir']} used by two cases")
                used_mir.add(rec["mir"])
                check_mir(rec, case, mir)
            elif rec["class"] == "Offset3fBug":
                check_offset3f(rec, kernel, work)
            elif rec["class"] in ("UnsupportedInstruction", "OpcodeReuse"):
                check_isa(rec, kernel, obj, out_bin / rec["object"], work)
            elif rec["class"] == "Xnack":
                xnack = (obj.e_flags >> 8) & 3
                if (xnack == 3) != bool(rec["expect"]):
                    raise BuildError(f"case {rec['name']}: e_flags {obj.e_flags:#x}")
                rec["llvm_check"] = f"llvm-readelf-16 -h: e_flags {obj.e_flags:#x}"
            records.append(rec)
        unused = set(src.kernels) - used_kernels
        if unused:
            raise BuildError(f"{src.path.name}: kernels without a case: {sorted(unused)}")
    if set(mir) - used_mir:
        raise BuildError(f"MIR functions without a case: {sorted(set(mir) - used_mir)}")
    names = [r["name"] for r in records]
    if len(set(names)) != len(names):
        raise BuildError("case names are not unique")
    return {
        "generator": "tools/build_hazard_cases.py",
        "conventions": {
            "addresses": "virtual addresses as llvm-objdump-16 prints them; at_offsets are "
                         "relative to the kernel symbol",
            "all_findings": "every finding class expected in the case's kernel with its "
                            "addresses; classes not listed: zero findings",
            "levels": "instruction: at = the instructions where the mitigation goes (the "
                      "second instruction of a hazard pair); kernel: at = the kernel "
                      "descriptor NAME.kd; code_object: no address",
            "opcode_reuse": "an instruction whose bytes decode to another gfx1010 "
                            "instruction is OpcodeReuse only, not also UnsupportedInstruction",
            "llvm_confirms": "true: an LLVM tool agrees (see llvm_check); false: LLVM 16 is "
                             "known to disagree (see llvm_check); null: no LLVM oracle",
        },
        "objects": {
            f"{o.name}.hsaco": {"source": f"src/{o.source.path.name}", "mcpu": o.mcpu,
                                "e_flags": o.e_flags, "size": len(o.data),
                                "md5": hashlib.md5(o.data).hexdigest()}
            for o in objects.values()
        },
        "classes": list(CLASSES),
        "cases": records,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="compare a fresh build with the committed outputs")
    args = parser.parse_args()
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        print(f"build_hazard_cases: missing tools: {missing}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        out_bin = work / "bin"
        out_bin.mkdir()
        try:
            doc = build(out_bin, work)
        except BuildError as e:
            print(f"build_hazard_cases: {e}", file=sys.stderr)
            return 1
        text = json.dumps(doc, indent=1) + "\n"
        if args.check:
            same = CASES_JSON.exists() and CASES_JSON.read_text() == text
            for f in out_bin.glob("*.hsaco"):
                same = same and (BIN / f.name).exists() and (BIN / f.name).read_bytes() == f.read_bytes()
            print("up to date" if same else "OUT OF DATE")
            return 0 if same else 1
        BIN.mkdir(parents=True, exist_ok=True)
        for f in BIN.glob("*.hsaco"):
            f.unlink()
        for f in sorted(out_bin.glob("*.hsaco")):
            shutil.copyfile(f, BIN / f.name)
            (BIN / f.name).chmod(0o644)
        CASES_JSON.write_text(text)
    recs = doc["cases"]
    confirmed = sum(1 for r in recs if r["llvm_confirms"])
    print(f"{len(doc['objects'])} code objects, {len(recs)} cases "
          f"({sum(1 for r in recs if r['expect'])} positive), {confirmed} confirmed by LLVM, "
          f"{sum(1 for r in recs if r['llvm_confirms'] is False)} where LLVM 16 differs")
    for cls in CLASSES:
        rs = [r for r in recs if r["class"] == cls]
        print(f"  {cls:36s} {len(rs):3d} cases, {sum(1 for r in rs if r['expect']):3d} positive, "
              f"{sum(1 for r in rs if r['llvm_confirms']):3d} LLVM-confirmed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
