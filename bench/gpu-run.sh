#!/bin/bash
# gpu-run.sh: runs the test suite, calibration and benchmarks on a GPU
# machine that has the NVIDIA driver and CUDA but none of our Debian
# packages, from a build made elsewhere. Used with the device tool:
#
#   here:  bench/gpu-pack.sh            (builds build-gpu/ and .gpu/)
#   there: bench/gpu-run.sh STAGE...    (carry .gpu; results go to $OUT)
#
# Stages, run in the order given:
#   env             the machine: GPU, CPU, OS, and whether every library loads
#   test            every test program and test script, with a summary line
#   transfer        bench/cuda-transfer: pageable and pinned copy rates
#   copies          bench/device-copy on cuda0: the backend's (staged) copies,
#                   contiguous against pitched, each way alone and both at once,
#                   then the same through the runtime alone (copy_threads=0)
#   calibrate[-q]   poas-calibrate (full, or --quick) of cpu0 and cuda0 (or
#                   CAL_DEVICES); every
#                   timed sample is kept in calibrate-samples.log (POAS_LOG=3)
#   accuracy[:DEV]  bench/accuracy on cuda0 and cpu0 (or DEV) with that profile
#   bench:SIZES:DT:REPEAT[:BASELINES]   poas-bench gemm on cpu0,cuda0, recorded
#                   like bench/record.sh (baselines cblas,cublas by default);
#                   a device alone or a baseline runs a row block beyond ALONE_LIMIT s
#                   (default 30, poas-bench --alone-limit); DEVICES sets the
#                   selection (default cpu0,cuda0)
#   overhead[:DEV]  bench/call-overhead: where a small call's fixed cost goes
#   trace:N[:DEVS]  an n x n x n sgemm (poas-demo) on DEVS (cpu0,cuda0) with POAS_TRACE;
#                   the trace holds its second, warm call
#   openblas        which kernel OpenBLAS picked, and cblas at n=4096 under others
# Everything it writes lands under $OUT (or ./gpu-out when OUT is unset).
set -u
# Every stage is known before any runs: a typo found after minutes of a
# GPU's lent time is that time lost (and an exit inside the stages' loop,
# a pipeline's subshell, would not stop the script).
for s in "$@"; do
  case $s in
    env | test | transfer | copies | calibrate | calibrate-q | accuracy | accuracy:* | bench:?* | \
      trace:?* | overhead | overhead:* | openblas) ;;
    *) echo "gpu-run.sh: unknown stage '$s' (see the stages at the top of $0)" >&2; exit 2 ;;
  esac
done
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/bench/settings.sh"
out=${OUT:-$src/gpu-out}
mkdir -p "$out"
pack=${GPU_PACK:-$src/.gpu}
work=${TMPDIR:-/tmp}/poas-gpu
build=$work/build
rm -rf "$work" && mkdir -p "$build" &&
  tar -C "$build" -xJf "$pack/build-gpu.tar.xz" && tar -C "$work" -xJf "$pack/lib.tar.xz" ||
  { echo "gpu-run.sh: run bench/gpu-pack.sh first" >&2; exit 1; }

# CUDA's libraries: the toolkit's folder, else the pip wheels' folders.
cudalib=
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda-*/lib64 /usr/local/lib; do
  [ -e "$d/libcublas.so.13" ] && cudalib=$cudalib:$d
done
if [ -z "$cudalib" ]; then
  cudalib=$(python3 - <<'EOF' 2>/dev/null
import glob, os, site
dirs = set()
for sp in site.getsitepackages():
    for f in glob.glob(os.path.join(sp, "nvidia", "**", "libcu*.so.*"), recursive=True):
        dirs.add(os.path.dirname(f))
print(":" + ":".join(sorted(dirs)))
EOF
)
fi
# poas-bench runs gnuplot as $gnuplot_wrap (gpu-pack.sh configured the build
# so): the machine's own gnuplot, without the packed libraries, which are
# Debian's builds and not the machine's. Under them its plot step failed in
# every GPU session ("/usr/bin/gnuplot failed").
gnuplot_wrap=/tmp/poas-gpu-gnuplot
if gp=$(command -v gnuplot); then
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "${LD_LIBRARY_PATH:-}" "$gp" >"$gnuplot_wrap" &&
    chmod +x "$gnuplot_wrap"
fi
export LD_LIBRARY_PATH=$work/lib$cudalib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export top_srcdir=$src top_builddir=$build
profile=$out/profile.json
# A profile calibrated by an earlier call, brought back and put in .gpu/.
[ -f "$pack/profile.json" ] && cp "$pack/profile.json" "$profile"
# Named once it exists: the tools stop on a named profile they cannot read,
# and without one they say their times are built-in estimates.
[ -f "$profile" ] && export POAS_PROFILE=$profile
machine=${POAS_MACHINE:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-' | tr -cd 'A-Za-z0-9-')-$(nproc)c}
commit=$(cat "$pack/commit" 2>/dev/null || echo unknown)
stamp() { date -u '+%Y-%m-%d %H:%M:%S UTC'; }

stage_env() {
  echo "== env ($(stamp)), commit $commit, machine $machine"
  nvidia-smi 2>&1 | head -20
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Socket|NUMA node\(s\)|L3'
  grep PRETTY_NAME /etc/os-release
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$build/tools/poas-info" | grep -E 'not found|cublas|cudart|openblas' || true
  # Whether poas-bench's plots will be drawn (test-bench.sh's plot step).
  if command -v gnuplot >/dev/null; then
    "$gnuplot_wrap" -e 'set terminal svg; set output "/dev/null"; plot x' &&
      echo "gnuplot: plots through $gnuplot_wrap"
  else
    echo "gnuplot: none on this machine (test-bench.sh's plot step will fail)"
  fi
  ls /etc/OpenCL/vendors 2>/dev/null
  OPENBLAS_VERBOSE=2 "$build/tools/poas-info" 2>&1
}

stage_transfer() {
  echo "== transfer ($(stamp))"
  "$build/bench/cuda-transfer" 16 64 256 1024 2>&1
}

stage_copies() {
  echo "== copies ($(stamp))"
  local spec
  for spec in cuda0 cuda0:copy_threads=0; do
    echo "-- $spec"
    "$build/bench/device-copy" --devices $spec 256K 1 4 7 16 64 256 2>&1
  done | tee "$out/device-copy.md"
}

stage_test() {
  echo "== test ($(stamp))"
  local pass=0 fail=0 skip=0 t rc
  for t in "$build"/tests/test-* "$src"/tests/test-*.sh "$src"/tests/poas-plan.sh; do
    case $t in *.c|*.o) continue ;; esac
    [ -x "$t" ] || continue
    (cd "$build" && POAS_PROFILE=/nonexistent-poas-profile.json OMP_NUM_THREADS=1 \
      timeout 300 "$t") >"$work/$(basename "$t").log" 2>&1
    rc=$?
    case $rc in
      0) pass=$((pass + 1)); echo "PASS $(basename "$t")" ;;
      77) skip=$((skip + 1)); echo "SKIP $(basename "$t")" ;;
      *) fail=$((fail + 1)); echo "FAIL $(basename "$t") ($rc)"; tail -30 "$work/$(basename "$t").log" ;;
    esac
  done
  grep -h 'cuda0:' "$work"/test-gemm-cuda.log | head -3
  tar -C "$work" -czf "$out/test-logs.tar.gz" $(cd "$work" && ls -- *.log)
  echo "tests: $pass passed, $fail failed, $skip skipped"
}

stage_calibrate() {
  echo "== calibrate $* ($(stamp))"
  local t0=$SECONDS
  POAS_LOG=3 "$build/tools/poas-calibrate" --devices "${CAL_DEVICES:-cpu0,cuda0}" --output "$profile" "$@" \
    2>"$work/calibrate.err"
  echo "calibration took $((SECONDS - t0)) s, exit status $?"
  [ -f "$profile" ] && export POAS_PROFILE=$profile
  grep -v '^poas: debug: calibrate ' "$work/calibrate.err"
  grep '^poas: debug: calibrate ' "$work/calibrate.err" | sed 's/^poas: debug: //' \
    >"$out/calibrate-samples.log"
  "$build/tools/poas-info" 2>&1 | tail -25
}

stage_accuracy() {
  local d
  for d in "$@"; do
    echo "== accuracy $d ($(stamp))"
    "$build/bench/accuracy" --devices "$d" 2>&1 | tee "$out/accuracy-$d.md" | tail -4
  done
}

stage_bench() {
  local sizes=$1 dt=$2 rep=$3 baselines=${4:-cblas,cublas}
  local devs=${DEVICES:-cpu0,cuda0}
  local base=$out/bench-$machine-${dt/,/}-${sizes//,/_}-$(echo "$devs" | tr -c 'A-Za-z0-9\n' '_')
  echo "== bench sizes $sizes dtype $dt repeat $rep ($(stamp))"
  {
    echo "# poas-bench gemm on $machine"
    echo
    echo "- date: $(stamp)"
    echo "- commit: $commit"
    echo "- host: $(uname -n), $(uname -srm), $(nproc) online CPUs, $(lscpu | sed -n 's/^Model name: *//p')"
    echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
    echo "- command: \`poas-bench gemm --sizes $sizes --dtype $dt --repeat $rep --devices $devs --baselines $baselines --alone-limit ${ALONE_LIMIT:-30}\`"
    record_environment
    echo
    echo '```'
    "$build/tools/poas-info" 2>&1
    echo '```'
    echo
    echo '```'
  } >"$base.md"
  "$build/bench/poas-bench" gemm --sizes "$sizes" --dtype "$dt" --repeat "$rep" \
    --devices "$devs" --baselines "$baselines" --alone-limit "${ALONE_LIMIT:-30}" \
    --csv "$base.csv" >>"$base.md" 2>&1
  echo "poas-bench exit status $?" >>"$base.md"
  echo '```' >>"$base.md"
  sed -n '/^```$/,$p' "$base.md" | tail -n +2 | grep -v '^```' | tail -40
}

stage_trace() {
  local n=$1 devs=${2:-cpu0,cuda0}
  echo "== trace n=$n on $devs ($(stamp))"
  CUDA_MODULE_LOADING=EAGER POAS_TRACE=$work/trace-$machine-${devs//,/-}-s-$n.json \
    "$build/tools/poas-demo" \
    --devices "$devs" -n "$n" 2>&1 | tail -30
  # The device tool returns at most 8 files: traces travel in one archive.
  tar -C "$work" -czf "$out/traces.tar.gz" $(cd "$work" && ls -- trace-*.json)
}

stage_overhead() {
  echo "== overhead $1 ($(stamp))"
  "$build/bench/call-overhead" --devices "$1" -n 64 2>&1
  "$build/bench/call-overhead" --devices "$1" -n 512 2>&1 | tail -n +2
}

stage_openblas() {
  echo "== openblas ($(stamp))"
  local ct
  for ct in "" SKYLAKEX HASWELL; do
    echo "-- OPENBLAS_CORETYPE=$ct"
    # (The CSV goes to a file of its own: poas-bench writes only to a
    # regular file, and refused /dev/null, which this stage once named.)
    OPENBLAS_VERBOSE=2 OPENBLAS_CORETYPE=$ct "$build/bench/poas-bench" gemm --sizes 4096 \
      --devices cpu0 --baselines cblas --repeat 2 --csv "$work/openblas.csv" 2>&1 |
      grep -E 'Core|cpu0|cblas'
  done
  rm -f "$work/openblas.csv"
}

# The GPU's clocks, power and temperature every 200 ms, for as long as the
# stages run: a GPU near its power limit clocks down, which shows in rates.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
  --format=csv -lms 200 >"$out/gpu-monitor.csv" 2>/dev/null &
monitor=$!

for s in "$@"; do
  case $s in
    env) stage_env ;;
    test) stage_test ;;
    transfer) stage_transfer ;;
    copies) stage_copies ;;
    calibrate) stage_calibrate ;;
    calibrate-q) stage_calibrate --quick ;;
    accuracy) stage_accuracy cuda0 cpu0 ;;
    accuracy:*) stage_accuracy "${s#accuracy:}" ;;
    bench:*) IFS=: read -r _ sz dt rep bl <<<"$s"; stage_bench "$sz" "$dt" "${rep:-3}" "${bl:-}" ;;
    trace:*) IFS=: read -r _ n devs <<<"$s"; stage_trace "$n" "$devs" ;;
    overhead) stage_overhead cuda0 ;;
    overhead:*) stage_overhead "${s#overhead:}" ;;
    openblas) stage_openblas ;;
    *) echo "gpu-run.sh: unknown stage '$s'" >&2; exit 2 ;;
  esac
done 2>&1 | tee -a "$out/gpu-run.log"
kill "$monitor" 2>/dev/null
# The device tool brings back at most 8 files: all but the log and the
# profile travel in one archive.
(cd "$out" && files=$(ls | grep -vxE 'gpu-run.log|profile.json|results-[0-9]+.tar.gz') &&
  [ -n "$files" ] && tar -czf "results-$(date +%s).tar.gz" $files && rm -f $files)
