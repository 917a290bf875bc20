#!/usr/bin/env bash
# Fetch Debian unstable's (sid) ROCm 6.4 packages into kdb_cache/ (never committed) with a private apt
# state: the system's apt configuration is not touched.  Idempotent; a package already unpacked is skipped.
#   tools/fetch_sid.sh                 -> librocblas4 (rocBLAS 4.4.1: Tensile library for gfx1010/gfx1030)
#   tools/fetch_sid.sh PKG [PKG ...]   -> those packages
# Unpacked under kdb_cache/sid-root/ (e.g. kdb_cache/sid-root/usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library/).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cache="$here/kdb_cache"
st="$cache/apt-sid"
pkgs=("$@")
[ ${#pkgs[@]} -eq 0 ] && pkgs=(librocblas4)
mkdir -p "$st/etc" "$st/lists/partial" "$st/cache/archives/partial" "$cache/sid-debs" "$cache/sid-root"
uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$uri" ] || uri=http://deb.debian.org/debian
printf 'Types: deb\nURIs: %s\nSuites: sid\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
  "$uri" > "$st/etc/sid.sources"
o=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$st/etc" -o "Dir::State::Lists=$st/lists"
   -o "Dir::Cache=$st/cache")
cd "$cache/sid-debs"
updated=0
for p in "${pkgs[@]}"; do
  if ! ls "$p"_*.deb >/dev/null 2>&1; then
    if [ $updated = 0 ]; then apt-get "${o[@]}" -qq update; updated=1; fi
    apt-get "${o[@]}" -qq download "$p"
  fi
  deb=$(ls "$p"_*.deb | head -n1)
  stamp="$cache/sid-root/.${deb}.done"
  if [ ! -f "$stamp" ]; then
    dpkg-deb -x "$deb" "$cache/sid-root"
    touch "$stamp"
  fi
  echo "$p: $deb unpacked in $cache/sid-root"
done
