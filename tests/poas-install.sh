#!/bin/sh
# poas-install.sh: what a user of the library gets from `make install`.
# The build is installed into a staging folder (DESTDIR), and the README's
# Linking example, taken from the README itself, is compiled with
# `pkg-config --cflags --libs poas` against the installed header and
# library alone (not the build tree's), then run on the CPU and its printed
# result checked. It is linked again statically with `pkg-config --static`,
# whose Libs.private must name every library libpoas.a needs, and run (a
# build configured --disable-shared or --disable-static checks the one it
# installs). Skips (77) where pkg-config is missing. CC, CFLAGS and LDFLAGS are the
# build's (make check exports them), so a sanitizer build links its own
# runtime.
set -u
fail() { echo "poas-install.sh: $*" >&2; exit 1; }
command -v pkg-config >/dev/null 2>&1 || { echo "poas-install.sh: no pkg-config"; exit 77; }
cc=${CC:-cc}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root

# A make of its own: the one running the tests must not hand it its jobs.
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "${top_builddir:-.}" install DESTDIR="$root" \
  >"$tmp/install.log" 2>&1 || fail "make install: $(tail -n 20 "$tmp/install.log")"
pc=$(find "$root" -name poas.pc | head -n 1)
[ -n "$pc" ] || fail "no poas.pc installed"
header=$(find "$root" -name poas.h | head -n 1)
[ -n "$header" ] || fail "no poas.h installed"
# A build configured --disable-shared or --disable-static installs one.
libdir=$(cd "$(dirname "$pc")/.." && pwd)
[ -f "$libdir/libpoas.so" ] || [ -f "$libdir/libpoas.a" ] || fail "no libpoas installed in $libdir"
PKG_CONFIG_LIBDIR=$(dirname "$pc")
export PKG_CONFIG_LIBDIR
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
# poas.pc names the prefix it was configured for; staged, that is under
# $root (a sysroot would move the system's own -L paths there too).
prefix=$(pkg-config --variable=prefix poas) || fail "pkg-config cannot read $pc"
poas_pc() { pkg-config --define-variable=prefix="$root$prefix" "$@" poas; }

sed -n '/^## Linking/,/^## [^L]/p' "${top_srcdir:-.}/README.md" | sed -n '/^```c$/,/^```$/p' |
  sed '1d;$d' >"$tmp/app.c"
grep -q "poas_sgemm" "$tmp/app.c" || fail "no C example under the README's Linking: $(cat "$tmp/app.c")"
# Where the example sets no devices the tests choose the CPU: PoCL's first
# kernels take seconds to build, and this is about linking.
POAS_DEVICES=cpu
export POAS_DEVICES

if [ -f "$libdir/libpoas.so" ]; then
  # shellcheck disable=SC2046 # pkg-config's words are meant to split
  "$cc" ${CFLAGS:-} -o "$tmp/app" "$tmp/app.c" $(poas_pc --cflags --libs) ${LDFLAGS:-} \
    >"$tmp/cc.log" 2>&1 || fail "the README's example does not build: $(cat "$tmp/cc.log")"
  out=$(LD_LIBRARY_PATH=$libdir "$tmp/app" 2>&1) || fail "the README's example failed: $out"
  [ "$out" = "C[0] = 64 (expected 64)" ] || fail "the README's example printed: $out"
  LD_LIBRARY_PATH=$libdir ldd "$tmp/app" | grep -q "libpoas.so.* => $libdir/" ||
    fail "the example did not load the installed library: $(LD_LIBRARY_PATH=$libdir ldd "$tmp/app")"
  # A libpoas with the CUDA backend finds the runtime through its own run
  # path: without it, a program found libcudart (and libpoas's dlopen found
  # cuBLAS by its soname) only through LD_LIBRARY_PATH or the system's
  # cache, and did not start where neither named CUDA's folder.
  if command -v readelf >/dev/null 2>&1; then
    dyn=$(readelf -d "$libdir/libpoas.so")
    cudart=$(echo "$dyn" | sed -n 's/.*(NEEDED).*\[\(libcudart[^]]*\)\]$/\1/p')
    runpath=$(echo "$dyn" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]$/\1/p')
    if [ -n "$cudart" ]; then
      found=
      for d in $(echo "$runpath" | tr ':' ' '); do
        [ -e "$d/$cudart" ] && found=$d
      done
      [ -n "$found" ] || fail "libpoas.so needs $cudart, which its run path ('$runpath') does not hold"
    fi
  fi
fi
[ -f "$libdir/libpoas.a" ] || exit 0

# shellcheck disable=SC2046
"$cc" ${CFLAGS:-} -o "$tmp/app-static" "$tmp/app.c" $(poas_pc --cflags) \
  $(poas_pc --static --libs | sed "s|-lpoas\\b|$libdir/libpoas.a|") ${LDFLAGS:-} \
  >"$tmp/cc.log" 2>&1 || fail "the example does not link statically: $(cat "$tmp/cc.log")"
ldd "$tmp/app-static" | grep -q "libpoas" && fail "the static example loads libpoas.so"
out=$("$tmp/app-static" 2>&1) || fail "the static example failed: $out"
[ "$out" = "C[0] = 64 (expected 64)" ] || fail "the static example printed: $out"
exit 0
