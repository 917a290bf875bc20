#!/usr/bin/env bash
# Build the rocPRIM gfx1010/gfx1030 pair used to validate kpatch's gfx1010
# analysis (issue 4) on real library code.
#
# tests/fixtures/src/rocprim/rocprim_algos.hip instantiates rocPRIM's device
# algorithms (Debian's librocprim-dev, /usr/include/rocprim).  This script
# compiles it once for both targets with Debian's hipcc, unbundles the two code
# objects and writes an oracle of counts computed by llvm-objdump-16 and
# llvm-readelf-16 (never by kpatch):
#
#   kdb_cache/rocprim/rocprim_algos.gfx1010.hsaco
#   kdb_cache/rocprim/rocprim_algos.gfx1030.hsaco
#   tests/fixtures/bin/rocprim/rocprim_algos.gfx10{10,30}.hsaco   (copies, if < 3 MB together)
#   tests/fixtures/bin/rocprim/ORACLE.json
#
# ORACLE.json, per code object: number of kernels (NAME.kd symbols), total
# instructions, `s_waitcnt_depctr 0xffe3` (VMEMtoScalarWriteHazard mitigation)
# and `s_waitcnt_vscnt null, 0x0` (LdsBranchVmemWARHazard mitigation, also used
# by ordinary release fences) counts, and the same counts per kernel.
#
# Usage: tools/build_rocprim_pair.sh [--no-copy]
#   --no-copy   build into kdb_cache only; leave tests/fixtures/bin/rocprim alone
# Needs: hipcc (HIP_PLATFORM=amd), clang-offload-bundler (LLVM 15),
# llvm-objdump-16, llvm-readelf-16, python3, librocprim-dev.  Exits nonzero on
# any failure.  Takes about 1.5 minutes on two cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$ROOT/tests/fixtures/src/rocprim/rocprim_algos.hip"
CACHE="$ROOT/kdb_cache/rocprim"
FIXTURE="$ROOT/tests/fixtures/bin/rocprim"
HIPCC=hipcc
BUNDLER=/usr/lib/llvm-15/bin/clang-offload-bundler
OBJDUMP=llvm-objdump-16
READELF=llvm-readelf-16
TARGETS=(gfx1010 gfx1030)
COPY_LIMIT=$((3 * 1024 * 1024))
export HIP_PLATFORM=amd   # hipcc calls nvcc on machines that also have CUDA

copy=1
for arg in "$@"; do
    case "$arg" in
        --no-copy) copy=0 ;;
        *) echo "usage: $0 [--no-copy]" >&2; exit 2 ;;
    esac
done

for tool in "$HIPCC" "$BUNDLER" "$OBJDUMP" "$READELF" python3; do
    command -v "$tool" >/dev/null || { echo "build_rocprim_pair: missing tool: $tool" >&2; exit 1; }
done
[ -d /usr/include/rocprim ] || { echo "build_rocprim_pair: librocprim-dev is not installed" >&2; exit 1; }

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$CACHE"

arches=()
for t in "${TARGETS[@]}"; do arches+=(--offload-arch="$t"); done

echo "== compiling rocprim_algos.hip for ${TARGETS[*]}"
start=$(date +%s)
# Compile by relative name from the source directory: no absolute path leaks
# into the outputs.
(cd "$(dirname "$SRC")" && "$HIPCC" -std=c++17 -O3 --cuda-device-only "${arches[@]}" \
    -c "$(basename "$SRC")" -o "$TMP/rocprim_algos.bundle")
end=$(date +%s)
echo "   compile time: $((end - start)) s"

total=0
for t in "${TARGETS[@]}"; do
    out="$CACHE/rocprim_algos.$t.hsaco"
    "$BUNDLER" --unbundle --type=o --input="$TMP/rocprim_algos.bundle" \
        --targets="hipv4-amdgcn-amd-amdhsa--$t" --output="$TMP/rocprim_algos.$t.hsaco"
    cp "$TMP/rocprim_algos.$t.hsaco" "$out"
    size=$(stat -c %s "$out")
    total=$((total + size))
    printf '   %-40s %9d bytes\n' "kdb_cache/rocprim/$(basename "$out")" "$size"
    "$OBJDUMP" -d --mcpu="$t" "$out" > "$TMP/$t.dis"
    "$READELF" -s --wide "$out" > "$TMP/$t.sym"
done
echo "   together: $total bytes"

mkdir -p "$FIXTURE"
if [ "$copy" = 1 ]; then
    if [ "$total" -lt "$COPY_LIMIT" ]; then
        for t in "${TARGETS[@]}"; do
            cp "$CACHE/rocprim_algos.$t.hsaco" "$FIXTURE/"
        done
        echo "   copied both code objects to tests/fixtures/bin/rocprim/"
    else
        echo "   code objects are >= 3 MB together: not copied to tests/fixtures/bin/rocprim/"
    fi
fi

echo "== ORACLE.json (counts by llvm-objdump-16 / llvm-readelf-16)"
python3 - "$FIXTURE/ORACLE.json" "$TMP" "$CACHE" "${TARGETS[@]}" <<'PY'
"""Count mitigation instructions per kernel in llvm-objdump-16's disassembly.

An instruction line of llvm-objdump-16 -d starts with a tab and has
`// ADDRESS: ENCODING`; a function starts with `ADDRESS <NAME>:`.  Kernels are
the symbols NAME that have a matching NAME.kd symbol in llvm-readelf-16 -s.
"""
import hashlib
import json
import os
import re
import sys

oracle_path, tmp, cache, *targets = sys.argv[1:]
FUNC_RE = re.compile(r"^([0-9a-f]+) <(.+)>:$")
INST_RE = re.compile(r"^\s+(\S.*?)\s*// ([0-9A-F]+):")
DEPCTR = re.compile(r"^s_waitcnt_depctr 0xffe3$")
VSCNT = re.compile(r"^s_waitcnt_vscnt null, 0x0$")


def symbols(path: str) -> dict[str, tuple[int, int]]:
    """name -> (value, size) of the .symtab entries in llvm-readelf-16 -s output."""
    syms = {}
    in_symtab = False
    for line in open(path):
        if line.startswith("Symbol table"):
            in_symtab = "'.symtab'" in line
            continue
        parts = line.split()
        if in_symtab and len(parts) >= 8 and parts[0][:-1].isdigit():
            syms[parts[7]] = (int(parts[1], 16), int(parts[2]))
    return syms


result = {
    "generator": "tools/build_rocprim_pair.sh",
    "source": "tests/fixtures/src/rocprim/rocprim_algos.hip",
    "tools": {"disassembler": "llvm-objdump-16 -d --mcpu=TARGET", "symbols": "llvm-readelf-16 -s"},
    "patterns": {"depctr_ffe3": "s_waitcnt_depctr 0xffe3", "vscnt_null_0": "s_waitcnt_vscnt null, 0x0"},
    "notes": "total sums the kernels only; outside_kernels counts disassembly under other "
             "labels (the s_code_end padding shows up as <.text>)",
    "code_objects": {},
}
KEYS = ("instructions", "depctr_ffe3", "vscnt_null_0")
for t in targets:
    syms = symbols(os.path.join(tmp, f"{t}.sym"))
    kernels = {n[:-3] for n in syms if n.endswith(".kd")}
    per = {}
    current = None
    for line in open(os.path.join(tmp, f"{t}.dis")):
        m = FUNC_RE.match(line.rstrip("\n"))
        if m:
            current = m.group(2)
            per.setdefault(current, dict.fromkeys(KEYS, 0))
            continue
        m = INST_RE.match(line)
        if m and current is not None:
            text = " ".join(m.group(1).split())
            rec = per[current]
            rec["instructions"] += 1
            rec["depctr_ffe3"] += bool(DEPCTR.match(text))
            rec["vscnt_null_0"] += bool(VSCNT.match(text))
    missing = sorted(kernels - per.keys())
    if missing:
        sys.exit(f"kernels without disassembled code in {t}: {missing[:3]}")
    kernel_counts = {k: dict(per[k], address=syms[k][0], size=syms[k][1]) for k in sorted(kernels)}
    other = {k: v for k, v in sorted(per.items()) if k not in kernels}
    path = os.path.join(cache, f"rocprim_algos.{t}.hsaco")
    data = open(path, "rb").read()
    totals = {key: sum(per[k][key] for k in kernels) for key in KEYS}
    result["code_objects"][f"rocprim_algos.{t}.hsaco"] = {
        "target": t,
        "size": len(data),
        "md5": hashlib.md5(data).hexdigest(),
        "kernels": len(kernels),
        "total": totals,
        "outside_kernels": other,
        "per_kernel": kernel_counts,
    }
    print(f"   {t}: {len(kernels)} kernels, {totals['instructions']} instructions, "
          f"{totals['depctr_ffe3']} x s_waitcnt_depctr 0xffe3, "
          f"{totals['vscnt_null_0']} x s_waitcnt_vscnt null, 0x0")
with open(oracle_path, "w") as f:
    json.dump(result, f, indent=1, sort_keys=True)
    f.write("\n")
PY
echo "   wrote tests/fixtures/bin/rocprim/ORACLE.json"
