#!/usr/bin/env bash
# Fills .gpu/ for a run on the lent GPU machine (which has nvcc, CMake, ninja and Python but no package
# registry): ../shared/gpu/prepare.sh's Debian packages and scripts, plus what minigpt has needed since that list
# was written (ICU, cairo + Pango + fontconfig + DejaVu, cpp-httplib, libedit: the libraries and headers with the
# libraries their pkg-config files name, not the C runtime the machine has), and minja in third_party/.
# Then, with the device tool: carry [".gpu", "third_party"] and run `bash scripts/gpu_check.sh` (build, the CUDA
# tests, greedy CPU == CUDA, bench, compute-sanitizer).
# Usage: scripts/gpu_prepare.sh [peer]   (peer: keep llama.cpp's source for `on-gpu.sh ... peer`; without it the
# 8 MB tarball is left out, since everything carried must stay under the device tool's 64 MiB)
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.gpu-debs/' .git/info/exclude 2>/dev/null || echo '/.gpu-debs/' >> .git/info/exclude
if [ -d .gpu-debs ] && [ ! -d .gpu/debs ]; then mkdir -p .gpu && mv .gpu-debs .gpu/debs; fi # kept from last time
bash ../shared/gpu/prepare.sh
bash scripts/fetch_minja.sh
bash scripts/fetch_xgrammar.sh
EXTRA=(libicu-dev libcairo2-dev libpango1.0-dev fonts-dejavu-core libcpp-httplib-dev libedit-dev)
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
# The packages travel unpacked as one .tar.xz without what a build never reads (static libraries, docs, man
# pages, translations): 55 MB of .deb files are 27 MB so, and the checkout itself is ~26 MB of the 64 MiB a run
# carries. The .deb files stay here in .gpu-debs (ignored) for the next time; ../shared's copy of the corpus
# and tokenizers is left behind too (the tests and scripts/gpu_check.sh use tests/fixtures).
n=$(ls .gpu/debs | wc -l)
if [ ! -f .gpu/dep.tar.xz ] || [ .gpu/debs -nt .gpu/dep.tar.xz ]; then
  t=$(mktemp -d)
  for f in .gpu/debs/*.deb; do dpkg -x "$f" "$t"; done
  find "$t" -name '*.a' ! -name 'libgtest*' ! -name 'libgmock*' -delete # GoogleTest ships only static libraries
  rm -rf "$t"/usr/share/{doc,man,locale,info,lintian,bug,gtk-doc,bash-completion}
  tar -C "$t" -cJf .gpu/dep.tar.xz .
  rm -rf "$t"
fi
rm -rf .gpu-debs && mv .gpu/debs .gpu-debs
rm -rf .gpu/shared
repo=$(git ls-files -z | xargs -0 du -cb 2> /dev/null | tail -1 | cut -f1)
total=$(($(du -sb .gpu third_party | awk '{s += $1} END {print s}') + repo))
if [ "$total" -gt $((64 * 1024 * 1024)) ]; then
  echo "gpu_prepare: warning: the checkout, .gpu and third_party hold $((total >> 20)) MiB, over the 64 MiB a run can carry" >&2
fi
echo "gpu_prepare: $n packages in .gpu/dep.tar.xz; carry .gpu and third_party ($((total >> 20)) MiB with the checkout)"
du -sh .gpu third_party
