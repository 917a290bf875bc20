#!/usr/bin/env bash
# Fetch real ROCm libraries nobody here wrote into kdb_cache/ (never committed).
#   tools/fetch_corpus.sh          -> librocrand1 (25 MB library, one bundle, 7 GPU targets)
#   tools/fetch_corpus.sh --all    -> also librocsparse0 (1.3 GB library, 111 bundles)
# Uses Debian bookworm's packages: apt-get download + dpkg-deb -x. Idempotent.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="$here/kdb_cache"
pkgs=(librocrand1)
[ "${1:-}" = "--all" ] && pkgs+=(librocsparse0)
mkdir -p "$cache/debs" "$cache/root"
cd "$cache/debs"
for p in "${pkgs[@]}"; do
  if ! ls "$p"_*.deb >/dev/null 2>&1; then
    apt-get download "$p" >/dev/null 2>&1 || { apt-get update -qq && apt-get download "$p"; }
  fi
  deb=$(ls "$p"_*.deb | head -n1)
  stamp="$cache/root/.${deb}.done"
  if [ ! -f "$stamp" ]; then
    dpkg-deb -x "$deb" "$cache/root"
    touch "$stamp"
  fi
done
ls -la "$cache/root/usr/lib/x86_64-linux-gnu/" | grep -E 'librocrand|librocsparse' || true
