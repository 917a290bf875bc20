#!/usr/bin/env bash
# Rebuild every test fixture binary in tests/fixtures/bin/ from the kernel
# sources in tests/fixtures/src/ with Debian's toolchain, then write
# tests/fixtures/bin/MANIFEST.json: sizes, md5s and oracle facts computed by
# LLVM's tools (llvm-readelf-16, clang-offload-bundler), never by kpatch.
#
# Outputs (only under tests/fixtures/bin/):
#   <stem>.<hip|cl|s>.<gfx1010|gfx1030>.v<4|5>.hsaco  raw code objects
#   <stem>.hip.bundle   clang offload bundle (host + gfx1010 + gfx1030), hipcc --cuda-device-only
#   <stem>.hip.host.o   host object with a .hip_fatbin section, hipcc -c
#   <stem>.hip.ccob     CCOB v2 (zstd) compressed bundle, clang-19's bundler --compress
#   MANIFEST.json       oracle data from LLVM's tools
#
# Rerunnable and deterministic (sources are compiled by relative name from the
# src directory so no absolute path leaks into the outputs). Exits nonzero on
# any failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$ROOT/tests/fixtures/src"
OUT="$ROOT/tests/fixtures/bin"

CLANG=clang-15
HIPCC=hipcc
BUNDLER15=/usr/lib/llvm-15/bin/clang-offload-bundler
BUNDLER19=/usr/lib/llvm-19/bin/clang-offload-bundler
READELF=llvm-readelf-16
OBJCOPY=llvm-objcopy-16
DEVICE_LIBS=/usr/lib/x86_64-linux-gnu/amdgcn/bitcode
TARGETS=(gfx1010 gfx1030)
VERSIONS=(4 5)
# hipcc calls nvcc on a machine that also has CUDA unless told otherwise.
export HIP_PLATFORM=amd

for tool in "$CLANG" "$HIPCC" "$READELF" "$OBJCOPY" "$BUNDLER15" "$BUNDLER19" python3; do
    command -v "$tool" >/dev/null || { echo "build_fixtures: missing tool: $tool" >&2; exit 1; }
done

mkdir -p "$OUT"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# Build into a scratch directory first; replace bin/ contents only on success.
STAGE="$TMP/stage"
mkdir -p "$STAGE"
cd "$SRC"

built=()
note() { built+=("$1"); printf '  built %-45s %7d bytes\n' "$1" "$(stat -c %s "$STAGE/$1")"; }

echo "== raw code objects"
for src in *.hip *.cl *.s; do
    [ -e "$src" ] || continue
    stem="${src%.*}"
    lang="${src##*.}"
    for t in "${TARGETS[@]}"; do
        for v in "${VERSIONS[@]}"; do
            out="$stem.$lang.$t.v$v.hsaco"
            case "$lang" in
                hip)
                    "$HIPCC" --offload-arch="$t" --cuda-device-only --no-gpu-bundle-output \
                        -O3 -mcode-object-version="$v" -c "$src" -o "$STAGE/$out" ;;
                cl)
                    "$CLANG" -x cl -Xclang -finclude-default-header -target amdgcn-amd-amdhsa \
                        -mcpu="$t" -O3 -mcode-object-version="$v" \
                        --rocm-device-lib-path="$DEVICE_LIBS" "$src" -o "$STAGE/$out" ;;
                s)
                    # COV selects the hand-written metadata's amdhsa.version.
                    "$CLANG" -x assembler -target amdgcn-amd-amdhsa -mcpu="$t" \
                        -mcode-object-version="$v" -Wa,-defsym,COV="$v" "$src" -o "$STAGE/$out" ;;
            esac
            note "$out"
        done
    done
done

echo "== containers"
for src in *.hip; do
    stem="${src%.*}"
    arches=()
    for t in "${TARGETS[@]}"; do arches+=(--offload-arch="$t"); done
    "$HIPCC" "${arches[@]}" --cuda-device-only -O3 -c "$src" -o "$STAGE/$stem.hip.bundle"
    note "$stem.hip.bundle"
    "$HIPCC" "${arches[@]}" -O3 -c "$src" -o "$STAGE/$stem.hip.host.o"
    note "$stem.hip.host.o"
    # CCOB: the same entries as the bundle, re-bundled compressed by clang 19.
    ids="$("$BUNDLER15" --list --type=o --input="$STAGE/$stem.hip.bundle")"
    ins=(); tgts=()
    n=0
    while IFS= read -r id; do
        [ -n "$id" ] || continue
        f="$TMP/$stem.entry$n"
        "$BUNDLER15" --unbundle --type=o --input="$STAGE/$stem.hip.bundle" --targets="$id" --output="$f"
        ins+=(--input="$f"); tgts+=("$id"); n=$((n + 1))
    done <<< "$ids"
    (IFS=,; "$BUNDLER19" --type=o --targets="${tgts[*]}" "${ins[@]}" \
        --output="$STAGE/$stem.hip.ccob" --compress)
    note "$stem.hip.ccob"
done

# Replace previous outputs (only files this script owns).
find "$OUT" -maxdepth 1 -type f \( -name '*.hsaco' -o -name '*.hip.bundle' -o -name '*.hip.host.o' \
    -o -name '*.hip.ccob' -o -name 'MANIFEST.json' \) -delete
for f in "${built[@]}"; do cp "$STAGE/$f" "$OUT/$f"; done

echo "== MANIFEST.json (oracle facts from LLVM tools)"
python3 - "$OUT" "$TMP" "$READELF" "$OBJCOPY" "$BUNDLER15" "$BUNDLER19" "${built[@]}" <<'PY'
"""Write MANIFEST.json: size/md5 of every fixture and facts reported by LLVM's tools."""
import hashlib
import json
import os
import re
import subprocess
import sys

out_dir, tmp, readelf, objcopy, bundler15, bundler19, *names = sys.argv[1:]


def run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def digest(path: str) -> dict:
    data = open(path, "rb").read()
    return {"size": len(data), "md5": hashlib.md5(data).hexdigest()}


def code_object_facts(path: str) -> dict:
    """e_flags, EI_ABIVERSION, amdhsa.target and .kd symbols as llvm-readelf-16 prints them."""
    header = run(readelf, "-h", path)
    flags = re.search(r"^\s*Flags:\s+(0x[0-9a-fA-F]+)", header, re.M).group(1)
    abi = int(re.search(r"^\s*ABI Version:\s+(\d+)", header, re.M).group(1))
    notes = run(readelf, "--notes", path)
    m = re.search(r"^amdhsa\.target:\s+(\S+)", notes, re.M)
    target = m.group(1).strip("'\"") if m else None
    # .symtab only: --symbols prints .dynsym and .symtab; take the .symtab table.
    syms = run(readelf, "--syms", path)
    symtab = syms.split("Symbol table '.symtab'", 1)[1] if "'.symtab'" in syms else syms
    kds = []
    for line in symtab.splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[7].endswith(".kd"):
            kds.append({"name": parts[7], "value": int(parts[1], 16), "size": int(parts[2]),
                        "type": parts[3], "bind": parts[4]})
    return {
        "e_flags": int(flags, 16),
        "e_flags_hex": flags,
        "ei_abiversion": abi,
        # AMDGPUUsage: EI_ABIVERSION 2 -> code object V4, 3 -> V5.
        "code_object_version": abi + 2,
        "target_id": target,
        "kernel_descriptors": sorted(kds, key=lambda k: k["value"]),
    }


def bundle_facts(path: str, bundler: str, tag: str) -> dict:
    """Entry ids (clang-offload-bundler --list) and each unbundled entry's digest/facts."""
    # Sorted: clang 19's --list prints entries in hash order, not file order.
    ids = sorted(i for i in run(bundler, "--list", "--type=o", f"--input={path}").splitlines() if i)
    entries = []
    for n, ident in enumerate(ids):
        f = os.path.join(tmp, f"{tag}.{n}")
        unbundle = (bundler, "--unbundle", "--type=o", f"--input={path}", f"--output={f}")
        try:
            run(*unbundle, f"--targets={ident}")
        except subprocess.CalledProcessError:
            # clang 19 stores and lists the host entry as 'host-x86_64-unknown-linux--'
            # but only unbundles it when asked for 'host-x86_64-unknown-linux'.
            if not ident.endswith("--"):
                raise
            run(*unbundle, f"--targets={ident[:-2]}")
        e = {"id": ident, **digest(f)}
        if e["size"]:
            e["code_object"] = code_object_facts(f)
        entries.append(e)
    return {"bundle_ids": ids, "entries": entries}


def host_object_facts(path: str) -> dict:
    """Location of .hip_fatbin (llvm-readelf-16 -S) and the bundle inside it."""
    secs = run(readelf, "-S", "-W", path)
    info = {}
    for line in secs.splitlines():
        m = re.match(r"\s*\[\s*(\d+)\]\s+(\S+)\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m and m.group(2) in (".hip_fatbin", ".hipFatBinSegment"):
            info[m.group(2)] = {"index": int(m.group(1)), "offset": int(m.group(5), 16),
                                "size": int(m.group(6), 16)}
    f = os.path.join(tmp, os.path.basename(path) + ".fatbin")
    run(objcopy, "-O", "binary", "--only-section=.hip_fatbin", path, f)
    fat = {**info[".hip_fatbin"], **bundle_facts(f, bundler15, os.path.basename(path))}
    return {"hip_fatbin": fat, "hipFatBinSegment": info.get(".hipFatBinSegment")}


files = {}
for name in sorted(names):
    p = os.path.join(out_dir, name)
    entry = {**digest(p)}
    if name.endswith(".hsaco"):
        entry["kind"] = "code_object"
        entry["llvm"] = code_object_facts(p)
    elif name.endswith(".hip.bundle"):
        entry["kind"] = "offload_bundle"
        entry["llvm"] = bundle_facts(p, bundler15, name)
    elif name.endswith(".hip.ccob"):
        entry["kind"] = "compressed_offload_bundle"
        entry["llvm"] = bundle_facts(p, bundler19, name)
    elif name.endswith(".hip.host.o"):
        entry["kind"] = "host_object"
        entry["llvm"] = host_object_facts(p)
    files[name] = entry


def version(tool: str) -> str:
    text = run(tool, "--version")
    m = re.search(r"version\s+(\S+)", text)
    return m.group(1) if m else text.splitlines()[0]


manifest = {
    "about": ("Oracle data produced by LLVM's tools (llvm-readelf-16, llvm-objcopy-16, "
              "clang-offload-bundler 15/19) over the fixtures in this directory, written by "
              "tools/build_fixtures.sh. Not produced by kpatch; do not edit by hand. "
              "size/md5 are of the files; under 'llvm': e_flags and ei_abiversion from "
              "llvm-readelf-16 -h, target_id from amdhsa.target in llvm-readelf-16 --notes, "
              "kernel_descriptors = the .kd symbols of .symtab from llvm-readelf-16 --syms, "
              "bundle_ids from clang-offload-bundler --list (sorted; clang 19 lists in hash "
              "order), entries unbundled by it (15 for plain bundles, 19 for CCOB), "
              "hip_fatbin offset/size from llvm-readelf-16 -S."),
    "tools": {"llvm-readelf": version(readelf), "clang-offload-bundler-15": version(bundler15),
              "clang-offload-bundler-19": version(bundler19)},
    "files": files,
}
with open(os.path.join(out_dir, "MANIFEST.json"), "w") as fh:
    json.dump(manifest, fh, indent=1, sort_keys=False)
    fh.write("\n")
PY

total=$(cat "$OUT"/* | wc -c)
echo "== summary: ${#built[@]} binaries + MANIFEST.json in ${OUT#$ROOT/}, $total bytes total"
