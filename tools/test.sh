#!/usr/bin/env bash
# Install everything the tests need, then run the whole test suite.
#   - Debian packages: the LLVM 16 tools (test oracles; llvm-16-dev and g++
#     to read LLVM's implicit-register tables), gcc (builds the load-time hook
#     when kpatch is installed) and libhsa-runtime-dev (ROCr's hsa_api_trace.h,
#     for the hook's test harness), clang/hipcc/ROCm
#     device libs and bundlers (fixture builders), all from Debian bookworm,
#     python3-torch (a CPU-only PyTorch: `kpatch selftest --device cpu` tests
#     its harness with it) and python3-venv (Debian's python3 needs it to create a venv);
#   - a virtual environment of its own ($KPATCH_TEST_VENV, default .venv/):
#     kpatch with its test extras (pytest, hypothesis) is installed
#     there, never into the system or global interpreter (PEP 668), so a
#     package that happens to be installed globally cannot hide a missing
#     dependency;
#   - the real corpora (Debian's librocrand1 and librocsparse0, and Debian
#     unstable's librocblas4, its gfx1010/gfx1030 files) into kdb_cache/.
# Extra arguments go to pytest (e.g. tools/test.sh -k kdb -x).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
pkgs=(gcc libhsa-runtime-dev llvm-16 llvm-16-dev g++ clang-15 lld-15 clang-19 hipcc libamdhip64-dev rocm-device-libs librocprim-dev sqlite3 chromium python3-torch)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
venv="${KPATCH_TEST_VENV:-.venv}"
if [ ! -x "$venv/bin/python" ] && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "creating the test environment $venv"
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
bash tools/fetch_corpus.sh >/dev/null
# librocsparse0 too: the emulator's rocSPARSE recipes are tested on its real kernels (94 MB download)
bash tools/fetch_corpus.sh --all >/dev/null || echo "warning: could not fetch Debian's librocsparse0: its tests will be skipped"
# rocBLAS 4.4.1 from Debian unstable (gfx1010/gfx1030 files; downloads kept in ~/.cache/kpatch/sid)
bash tools/fetch_sid.sh >/dev/null || echo "warning: could not fetch Debian unstable's librocblas4: its tests will be skipped"
# the venv's kpatch and python come first for tests that run the command
export PATH="$(cd "$venv" && pwd)/bin:$PATH"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
