#!/usr/bin/env bash
# Fetch Debian unstable's (sid) ROCm 6.4 packages and unpack what kpatch's tests and tools read into
# kdb_cache/sid-root/ (never committed), with a private apt state: the system's apt setup is not touched.
#   tools/fetch_sid.sh                  -> librocblas4 (rocBLAS 4.4.1), only its gfx1010/gfx1030 files
#   tools/fetch_sid.sh --all-files      -> the same, every file of the package (2.9 GB unpacked)
#   tools/fetch_sid.sh PKG [PKG ...]    -> those packages, whole
# Downloads are kept in $KPATCH_DEB_CACHE (default ~/.cache/kpatch/sid), outside the clone, so that a fresh
# clone (CI) does not download them again; a package already unpacked is skipped.  The rocBLAS library
# ends up in kdb_cache/sid-root/usr/lib/x86_64-linux-gnu/rocblas/4.4.1/library/.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$here/kdb_cache/sid-root"
store="${KPATCH_DEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kpatch/sid}"
st="$store/apt"
pkgs=()
patterns=()
all=0
for a in "$@"; do
  case "$a" in
    --all-files) all=1 ;;
    *) pkgs+=("$a") ;;
  esac
done
if [ ${#pkgs[@]} -eq 0 ]; then
  pkgs=(librocblas4)
  [ $all = 1 ] || patterns=('*gfx1010*' '*gfx1030*')
fi
mkdir -p "$st/etc" "$st/lists/partial" "$st/cache/archives/partial" "$store/debs" "$root"
uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$uri" ] || uri=http://deb.debian.org/debian
printf 'Types: deb\nURIs: %s\nSuites: sid\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
  "$uri" > "$st/etc/sid.sources"
o=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$st/etc" -o "Dir::State::Lists=$st/lists"
   -o "Dir::Cache=$st/cache")
cd "$store/debs"
updated=0
for p in "${pkgs[@]}"; do
  if ! ls "$p"_*.deb >/dev/null 2>&1; then
    if [ $updated = 0 ]; then apt-get "${o[@]}" -qq update; updated=1; fi
    apt-get "${o[@]}" -qq download "$p"
  fi
  deb=$(ls "$p"_*.deb | head -n1)
  tag="${deb}"
  [ ${#patterns[@]} -gt 0 ] && tag="${deb}.gfx10"
  stamp="$root/.${tag}.done"
  if [ ! -f "$stamp" ]; then
    if [ ${#patterns[@]} -gt 0 ]; then
      dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$root" --wildcards "${patterns[@]}"
    else
      dpkg-deb -x "$deb" "$root"
    fi
    touch "$stamp"
  fi
  echo "$p: $deb unpacked in $root${patterns:+ (only ${patterns[*]})}"
done
