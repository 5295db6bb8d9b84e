#!/usr/bin/env bash
# Fills .gpu/ for a run on the lent GPU machine (which has nvcc, CMake, ninja and Python but no package
# registry): ../shared/gpu/prepare.sh's Debian packages and scripts, plus what minigpt has needed since that list
# was written (ICU, cairo + fontconfig + DejaVu, cpp-httplib, libedit: the libraries and headers with the
# libraries their pkg-config files name, not the C runtime the machine has), and minja in third_party/.
# Then, with the device tool: carry [".gpu", "third_party"] and run `bash .gpu/on-gpu.sh test bench [peer]`.
# Usage: scripts/gpu_prepare.sh [peer]   (peer: keep llama.cpp's source for `on-gpu.sh ... peer`; without it the
# 8 MB tarball is left out, since everything carried must stay under the device tool's 64 MiB)
set -euo pipefail
cd "$(dirname "$0")/.."
bash ../shared/gpu/prepare.sh
bash scripts/fetch_minja.sh
EXTRA=(libicu-dev libcairo2-dev fonts-dejavu-core libcpp-httplib-dev libedit-dev)
mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances --no-pre-depends "${EXTRA[@]}" | grep -E '^[a-z0-9]' | sort -u |
  grep -E '^(lib|x11proto|xtrans-dev|xorg-sgml-doctools|uuid-dev|zlib1g|fonts-dejavu-core|fontconfig-config)' |
  grep -vE '^(libc6|libc-dev-bin|libgcc-s1|libstdc\+\+6|libcrypt|libperl|libpython|libselinux|libsepol|libblkid|libmount|libdb5|libgdbm|libreadline|libslang|libnewt|libtextwrap|libdebian-installer|libsqlite|libelf|libglib2.0-bin|libglib2.0-dev-bin|libglib2.0-data|libpcre2|libpkgconf|libcairo-gobject|libcairo-script)')
missing=()
for p in "${closure[@]}"; do
  ls .gpu/debs/"${p}"_*.deb > /dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  (cd .gpu/debs && apt-get download "${missing[@]}")
fi
[ "${1:-}" = peer ] || rm -f .gpu/llama.tgz
total=$(du -sk .gpu third_party | awk '{s += $1} END {print s}')
if [ "$total" -gt $((64 * 1024)) ]; then
  echo "gpu_prepare: warning: .gpu and third_party hold $((total / 1024)) MiB, over the 64 MiB a run can carry" >&2
fi
echo "gpu_prepare: $(ls .gpu/debs | wc -l) packages in .gpu/debs; carry .gpu and third_party"
du -sh .gpu third_party
