#!/bin/sh
# Rebuild the rewriter test objects from their sources (Debian bookworm:
# clang-15, lld-15, hipcc 5.2). The .hsaco files are committed; the tests
# do not run this.
set -e
cd "$(dirname "$0")"
for s in reloc_cases immovable; do
    clang-15 -x assembler -target amdgcn-amd-amdhsa -mcpu=gfx1030 -mcode-object-version=4 \
        "$s.s" -o "$s.gfx1030.hsaco"
done
HIP_PLATFORM=amd hipcc --offload-arch=gfx1030 --cuda-device-only -O3 -c calls.hip -o calls.bundle
/usr/lib/llvm-15/bin/clang-offload-bundler --unbundle --type=o --input=calls.bundle \
    --targets=hipv4-amdgcn-amd-amdhsa--gfx1030 --output=calls.hip.gfx1030.hsaco
rm -f calls.bundle
HIP_PLATFORM=amd hipcc --offload-arch=gfx1030 --cuda-device-only -O3 -c calls_dot.hip -o calls_dot.bundle
/usr/lib/llvm-15/bin/clang-offload-bundler --unbundle --type=o --input=calls_dot.bundle \
    --targets=hipv4-amdgcn-amd-amdhsa--gfx1030 --output=calls_dot.hip.gfx1030.hsaco
rm -f calls_dot.bundle
