#!/bin/sh
# record.sh: runs `poas-bench gemm` and records it under bench/results/ as
# bench-<machine>-<date>-<commit>.{md,csv,svg}: the Markdown file holds the
# machine, date, commit, command, the devices POAS saw and the table; the
# CSV and the plot are poas-bench's own. Usage, from the source tree:
#   bench/record.sh MACHINE [poas-bench gemm options...]
# MACHINE names the machine class (e.g. ci-2core, h100); the build is looked
# for in $POAS_BUILDDIR, ./build, then ./ .
set -eu
[ $# -ge 1 ] || { echo "usage: bench/record.sh MACHINE [poas-bench gemm options...]" >&2; exit 2; }
machine=$1
shift
src=$(cd "$(dirname "$0")/.." && pwd)
for b in "${POAS_BUILDDIR:-}" "$src/build" "$src"; do
  if [ -n "$b" ] && [ -x "$b/bench/poas-bench" ]; then build=$b; break; fi
done
[ -n "${build:-}" ] || { echo "record.sh: no built bench/poas-bench found" >&2; exit 1; }
date=$(date -u +%Y%m%d-%H%M%S)
commit=$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit=$commit-dirty
fi
base=$src/bench/results/bench-$machine-$date-$commit
. "$src/bench/settings.sh"
# The devices section shows the selection the benchmark runs (cores=N and
# threads=N change which profile entries match), and the profile it runs
# with: --profile's, else POAS_PROFILE's or the default, as poas-bench's.
devices=
profile=
prev=
for a in "$@"; do
  case $prev in -d | --devices) devices=$a ;; --profile) profile=$a ;; esac
  case $a in --devices=*) devices=${a#--devices=} ;; --profile=*) profile=${a#--profile=} ;; esac
  prev=$a
done
{
  echo "# poas-bench gemm on $machine"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "- commit: $commit"
  echo "- host: $(uname -n), $(uname -srm), $(getconf _NPROCESSORS_ONLN) online CPUs"
  echo "- command: \`poas-bench gemm $* --csv $(basename "$base").csv --plot $(basename "$base").svg\`"
  record_environment
  echo
  echo "## Devices"
  echo
  echo '```'
  "$build/tools/poas-info" ${devices:+--devices "$devices"} ${profile:+--profile "$profile"} 2>&1 ||
    true
  echo '```'
  echo
  echo "## Results"
  echo
  echo '```'
} >"$base.md"
status=0
"$build/bench/poas-bench" gemm "$@" --csv "$base.csv" --plot "$base.svg" >>"$base.md" 2>&1 || status=$?
echo '```' >>"$base.md"
echo "recorded $base.md (poas-bench exit status $status)"
exit $status
