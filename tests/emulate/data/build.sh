#!/usr/bin/env bash
# Build the emulator's validation kernels (emu_kernels.hip) for gfx1010 and
# gfx1030 with Debian's hipcc (HIP 5.2, clang 15) and librocprim-dev, and
# unbundle the two code objects next to this script.  Needs: hipcc,
# /usr/lib/llvm-15/bin/clang-offload-bundler, librocprim-dev.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
export HIP_PLATFORM=amd
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
hipcc -std=c++17 -O3 --cuda-device-only --offload-arch=gfx1010 --offload-arch=gfx1030 \
    -c emu_kernels.hip -o "$TMP/emu.bundle"
for t in gfx1010 gfx1030; do
    /usr/lib/llvm-15/bin/clang-offload-bundler --unbundle --type=o --input="$TMP/emu.bundle" \
        --targets="hipv4-amdgcn-amd-amdhsa--$t" --output="emu_kernels.$t.hsaco"
done
# wave64 kernels: OpenCL (HIP refuses wave64 on GFX10)
for t in gfx1010 gfx1030; do
    clang-15 -x cl -cl-std=CL2.0 -Xclang -finclude-default-header -target amdgcn-amd-amdhsa -mcpu="$t" \
        -mwavefrontsize64 -O3 --rocm-device-lib-path=/usr/lib/x86_64-linux-gnu/amdgcn/bitcode \
        emu_w64.cl -o "emu_w64.$t.hsaco"
done
# a kernel storing through a device global whose initial value is a relocated address
hipcc -std=c++17 -O3 --cuda-device-only --offload-arch=gfx1030 -c global_store.hip -o "$TMP/gs.bundle"
/usr/lib/llvm-15/bin/clang-offload-bundler --unbundle --type=o --input="$TMP/gs.bundle" \
    --targets="hipv4-amdgcn-amd-amdhsa--gfx1030" --output="global_store.gfx1030.hsaco"
# rocSPARSE-like kernels (names carry rocSPARSE's types) for the rocsparse recipe's tests
hipcc -std=c++17 -O3 --cuda-device-only --offload-arch=gfx1010 --offload-arch=gfx1030 \
    -c sparse_kernels.hip -o "$TMP/sp.bundle"
for t in gfx1010 gfx1030; do
    /usr/lib/llvm-15/bin/clang-offload-bundler --unbundle --type=o --input="$TMP/sp.bundle" \
        --targets="hipv4-amdgcn-amd-amdhsa--$t" --output="sparse_kernels.$t.hsaco"
done
# rocPRIM's segmented radix sort and 64-bit radix sort, instantiated as rocSPARSE does (recipes' tests)
hipcc -std=c++17 -O3 --cuda-device-only --offload-arch=gfx1010 --offload-arch=gfx1030 \
    -c rocprim_sorts.hip -o "$TMP/rs.bundle"
for t in gfx1010 gfx1030; do
    /usr/lib/llvm-15/bin/clang-offload-bundler --unbundle --type=o --input="$TMP/rs.bundle" \
        --targets="hipv4-amdgcn-amd-amdhsa--$t" --output="rocprim_sorts.$t.hsaco"
done
