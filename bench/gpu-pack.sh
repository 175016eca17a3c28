#!/bin/bash
# gpu-pack.sh: prepares what bench/gpu-run.sh needs on a GPU machine that
# has CUDA but none of our Debian packages: a static-libpoas build with the
# CUDA backend (build-gpu/, packed as .gpu/build-gpu.tar.xz, since libtool's
# wrapper scripts would point at this machine's paths) and the shared
# libraries it loads that such a machine lacks (.gpu/lib.tar.xz). Both
# folders are build outputs, which .gitignore keeps out of git: the device
# tool takes .gpu only when named in its carry.
# Then, with the device tool: carry .gpu and run `bench/gpu-run.sh STAGE...`.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
[ -x configure ] || autoreconf -fi
mkdir -p build-gpu .gpu
# poas-bench's gnuplot is gpu-run.sh's wrapper, which runs the GPU
# machine's own gnuplot without the packed libraries.
gnuplot_wrap=/tmp/poas-gpu-gnuplot
grep -q "\"$gnuplot_wrap\"" build-gpu/config.h 2>/dev/null || rm -f build-gpu/Makefile
if [ ! -f build-gpu/Makefile ]; then
  (cd build-gpu && ../configure --disable-shared --with-cuda GNUPLOT=$gnuplot_wrap >/dev/null)
fi
make -C build-gpu -j"$(nproc)" >/dev/null
make -C build-gpu -j"$(nproc)" check TESTS= >/dev/null
tar -C build-gpu -cJf .gpu/build-gpu.tar.xz \
  $(cd build-gpu && find tools bench tests -maxdepth 1 -type f -perm -u+x ! -name "*.sh" ! -name "*.la")
rm -rf .gpu/lib && mkdir -p .gpu/lib
# Every library the programs load, less what any Linux system has and what
# the CUDA install there provides.
ldd build-gpu/tools/* build-gpu/bench/poas-bench build-gpu/tests/test-gemm-cuda 2>/dev/null |
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  grep -vE '^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libcu[A-Za-z]*)\.so' |
  while read -r name path; do cp -L "$path" ".gpu/lib/$name"; done
tar -C .gpu -cJf .gpu/lib.tar.xz lib
rm -rf .gpu/lib
git rev-parse --short=12 HEAD >.gpu/commit
[ -z "$(git status --porcelain --untracked-files=no)" ] || echo "$(cat .gpu/commit)-dirty" >.gpu/commit
du -sh .gpu/*
