#!/usr/bin/env bash
# Install everything the tests need, then run the whole test suite.
#   - Debian packages: the LLVM 16 tools (test oracles), clang/hipcc/ROCm
#     device libs and bundlers (fixture builders), all from Debian bookworm;
#   - kpatch itself with its test extras (pytest, hypothesis);
#   - the real corpus (Debian's librocrand1) into kdb_cache/.
# Extra arguments go to pytest (e.g. tools/test.sh -k kdb -x).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
pkgs=(llvm-16 clang-15 lld-15 clang-19 hipcc libamdhip64-dev rocm-device-libs librocprim-dev sqlite3 chromium)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
python3 -m pip install -q --disable-pip-version-check -e '.[test]'
bash tools/fetch_corpus.sh >/dev/null
exec python3 -m pytest -q -p no:cacheprovider "$@"
