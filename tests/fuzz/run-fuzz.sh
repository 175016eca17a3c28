#!/usr/bin/env bash
# run-fuzz.sh: builds the profile-loader fuzzer with Debian's clang
# (libFuzzer + ASan + UBSan) and runs it over the seed corpus.
#   tests/fuzz/run-fuzz.sh [RUNS]     (default 1000000)
# Needs a configured build directory for config.h: BUILD (default ./build).
# Crashes are written to tests/fuzz/crashes/; turn each into a
# tests/profiles/bad-*.json regression case.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build=${BUILD:-$top/build}
runs=${1:-1000000}
out=${FUZZ_OUT:-$(mktemp -d)}
[ -f "$build/config.h" ] || { echo "run-fuzz.sh: no $build/config.h (configure first)"; exit 1; }
clang=${CLANG:-clang}
mkdir -p "$out/corpus" "$here/crashes"
# shellcheck disable=SC2046
$clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$top" -I"$top/include" -I"$build" $(pkg-config --cflags jansson) \
  "$here/fuzz-profile.c" "$top/models/profile.c" "$top/models/model.c" \
  "$top/core/log.c" "$top/core/util.c" "$top/core/error.c" \
  $(pkg-config --libs jansson) -lopenblas -lm -pthread -o "$out/fuzz-profile"
# The seed corpus stays as committed: new inputs go to a scratch folder;
# -jobs writes its log (fuzz-0.log) in the current directory, so run there.
cd "$out"
"$out/fuzz-profile" -runs="$runs" -jobs=1 -max_len=8192 -timeout=10 \
  -dict="$here/profile.dict" -artifact_prefix="$here/crashes/" \
  "$out/corpus" "$here/corpus"
