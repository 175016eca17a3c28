#!/usr/bin/env bash
# run-fuzz.sh: builds a fuzzer with Debian's clang (libFuzzer + ASan +
# UBSan) and runs it over its seed corpus. Five targets, picked by
# FUZZ_TARGET:
#   profile (the default)  the profile loader (fuzz-profile.c, corpus/)
#   spec                   the device-selection parser (fuzz-spec.c, spec-corpus/)
#   gemm                   poas_sgemm / poas_dgemm and their _async forms
#                          (fuzz-gemm.c, gemm-corpus/), over the whole library
#                          with the backends BUILD was configured with
#   csv                    poas-bench plot's CSV reader (fuzz-csv.c, csv-corpus/)
#   args                   the tools' readers of numbers and of --sizes and
#                          --shape lists (fuzz-args.c, args-corpus/)
#   all                    the five, one after the other
#   tests/fuzz/run-fuzz.sh [RUNS]     (default 1000000 runs per target)
# Needs a configured build directory for config.h: BUILD (default ./build).
# FUZZ_OUT (default a new temporary folder) takes the fuzzer binaries, the
# inputs found (corpus/, spec-corpus/, ...) and the logs (fuzz-<target>.log).
# Crashes are written to tests/fuzz/crashes/ (spec ones named spec-*,
# gemm ones gemm-*, csv ones csv-*, args ones args-*); turn each into a
# regression case in make check: a tests/profiles/bad-*.json for the
# profile loader, a case in tests/test-core.c for the spec parser, one in
# tests/test-api.c for GEMM, one in tests/test-bench.sh for the CSV reader
# or the lists, one in tests/poas-plan.sh for the numbers.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${BUILD:-$top/build}
runs=${1:-1000000}
target=${FUZZ_TARGET:-profile}
case $target in
  profile | spec | gemm | csv | args | all) ;;
  *) echo "run-fuzz.sh: FUZZ_TARGET is profile, spec, gemm, csv, args or all, not '$target'"; exit 1 ;;
esac
[ -f "$build/config.h" ] || { echo "run-fuzz.sh: no $build/config.h (configure first)"; exit 1; }
build=$(cd "$build" && pwd)
clang=${CLANG:-clang}
out=${FUZZ_OUT:-$(mktemp -d)}
mkdir -p "$out" "$here/crashes"
out=$(cd "$out" && pwd)

# fuzz NAME CORPUS-IN-OUT DICT MAX_LEN ARTIFACT-PREFIX SOURCES... -- LIBS...
fuzz() {
  local name=$1 scratch=$2 dict=$3 max_len=$4 prefix=$5
  shift 5
  local sources=() libs=()
  while [ "$1" != -- ]; do sources+=("$1"); shift; done
  shift
  libs=("$@")
  mkdir -p "$out/$scratch"
  $clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$top" -I"$top/include" -I"$build" "${sources[@]}" "${libs[@]}" -lm -pthread \
    -o "$out/fuzz-$name"
  # The seed corpus stays as committed: new inputs go to a scratch folder;
  # -jobs writes its log (fuzz-0.log) in the current directory, so run
  # there, and keep a copy under the target's name.
  (cd "$out" &&
    "$out/fuzz-$name" -runs="$runs" -jobs=1 -max_len="$max_len" -timeout=10 \
      -dict="$dict" -artifact_prefix="$prefix" "$out/$scratch" "$here/$scratch")
  cp "$out/fuzz-0.log" "$out/fuzz-$name.log"
}

fuzz_profile() {
  # shellcheck disable=SC2046
  fuzz profile corpus "$here/profile.dict" 8192 "$here/crashes/" \
    $(pkg-config --cflags jansson) \
    "$here/fuzz-profile.c" "$top/models/profile.c" "$top/models/model.c" \
    "$top/core/log.c" "$top/core/util.c" "$top/core/error.c" \
    -- $(pkg-config --libs jansson) -lopenblas
}

# The selection is at most 4095 characters (core/spec.c); a little past
# that reaches the refusal of a longer one.
fuzz_spec() {
  fuzz spec spec-corpus "$here/spec.dict" 4200 "$here/crashes/spec-" \
    "$here/fuzz-spec.c" "$top/core/spec.c" "$top/core/util.c" "$top/core/log.c" \
    "$top/core/error.c" --
}

# poas-bench plot's reader, over the file that holds it (report.c, which
# needs the library only for poas_version and the kinds' names).
fuzz_csv() {
  fuzz csv csv-corpus "$here/csv.dict" 8192 "$here/crashes/csv-" \
    "$here/fuzz-csv.c" "$top/bench/report.c" "$top/tools/json-out.c" "$top/core/error.c" --
}

# Header-only readers (tools/args.h, bench/cli.h, bench/shapes.h). An
# argument past a few hundred characters reads as any other.
fuzz_args() {
  fuzz args args-corpus "$here/args.dict" 512 "$here/crashes/args-" "$here/fuzz-args.c" --
}

# One of BUILD's Makefile variables, as configure and automake left it.
build_var() {
  # shellcheck disable=SC2016 # a make expression, for make to expand
  printf 'fuzz-print-var:\n\t@echo $(%s)\n' "$1" | make -s -C "$build" -f Makefile -f - fuzz-print-var
}

# The whole library: the sources, flags and libraries BUILD compiles it
# from (its backends' included), with clang's instrumentation instead.
# Its -I paths may be relative to BUILD, so clang runs there.
fuzz_gemm() {
  local sources=() src
  # shellcheck disable=SC2016 # a make expression, for make to expand
  for src in $(build_var 'filter %.c,$(libpoas_internal_la_SOURCES)'); do
    sources+=("$top/$src")
  done
  # shellcheck disable=SC2046
  # PoCL keeps what it allocates building its first kernels (lsan.supp).
  (cd "$build" && export LSAN_OPTIONS="suppressions=$top/tests/lsan.supp" &&
    fuzz gemm gemm-corpus "$here/gemm.dict" 96 "$here/crashes/gemm-" \
      $(build_var libpoas_internal_la_CPPFLAGS) "$here/fuzz-gemm.c" "${sources[@]}" \
      -- $(build_var libpoas_internal_la_LIBADD))
}

case $target in
  profile) fuzz_profile ;;
  spec) fuzz_spec ;;
  gemm) fuzz_gemm ;;
  csv) fuzz_csv ;;
  args) fuzz_args ;;
  all) fuzz_profile && fuzz_spec && fuzz_gemm && fuzz_csv && fuzz_args ;;
esac
