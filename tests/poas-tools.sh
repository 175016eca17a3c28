#!/bin/sh
# poas-tools.sh: poas-calibrate and poas-info as a user meets them: help,
# usage errors refused with exit 2 (an empty --output and a malformed
# device selection, named by where it came from, among them), an early
# error on the first line of a terminal, and a quick calibration of
# simulated devices (virtual time, so it takes no time): a quiet one
# writes no noise and no warning, and names its profile whole; a noisy one
# (sim:jitter) is flagged by poas-calibrate's summary, kept in the
# profile, and flagged again by poas-info, in its table and its JSON.
# poas-info also says once why there is no profile path, shows the
# profile --profile names, tells how to calibrate a device without a
# model, and fails when its output is lost. An empty --devices is a usage
# error in both. Every program of tools/ and bench/ that is built answers
# --help and --version on stdout with exit 0, refuses an unknown option
# and a bad value with exit 2 and a message naming it (every way getopt
# refuses an option said in getopt's words, in the program's own name, with
# where to read more), and fails (exit 1) when its stdout is closed or its
# reader gone.
set -u
calibrate="${top_builddir:-.}/tools/poas-calibrate"
info="${top_builddir:-.}/tools/poas-info"
fail() { echo "poas-tools.sh: $*" >&2; exit 1; }
# Whether $tmp/err holds what a program says of an option it refused, and
# that alone: "NAME: MESSAGE" and where to read more.
refused() {
  [ "$(cat "$tmp/err")" = "$1: $2
Try '$1 --help' for more information." ]
}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

"$calibrate" --help | grep -q "Usage: poas-calibrate" || fail "poas-calibrate --help"
"$info" --help | grep -q "Usage: poas-info" || fail "poas-info --help"
"$calibrate" --dtype x >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "--dtype x accepted"
grep -q "dtype must be s, d or sd" "$tmp/err" || fail "--dtype x: $(cat "$tmp/err")"
# poas-bench's spelling of both dtypes is taken too (an output under a
# regular file, which no folder can be made in, fails before anything is
# measured).
: >"$tmp/plain"
"$calibrate" --dtype s,d --output "$tmp/plain/p.json" >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] || fail "--dtype s,d: $(cat "$tmp/err")"
grep -q "dtype must" "$tmp/err" && fail "--dtype s,d refused: $(cat "$tmp/err")"
# On a terminal (util-linux script gives one), that error is the first
# line: no blank line ends a progress line that was never drawn.
if script -qec true /dev/null </dev/null >/dev/null 2>&1; then
  script -qec "'$calibrate' --devices sim --output '$tmp/plain/p.json'" /dev/null </dev/null \
    >"$tmp/tty" 2>&1
  case $(head -n 1 "$tmp/tty" | tr -d '\r') in
  poas-calibrate:*) ;;
  *) fail "on a terminal, an early error does not come first: $(cat "$tmp/tty")" ;;
  esac
fi
"$calibrate" --quick --devices sim --output '' >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "^poas-calibrate: --output '' names no file" "$tmp/err" ||
  fail "--output '' not a usage error: $(cat "$tmp/err")"

"$calibrate" --quick --devices sim --dtype s --output "$tmp/quiet.json" >"$tmp/out" 2>"$tmp/err" ||
  fail "quiet calibration failed: $(cat "$tmp/err")"
grep -q "heldout median heldout max  noise" "$tmp/out" || fail "no noise column: $(cat "$tmp/out")"
grep -q "machine was busy" "$tmp/err" && fail "a quiet sim called busy: $(cat "$tmp/err")"
grep -q "timing_noise" "$tmp/quiet.json" && fail "a quiet sim's profile holds timing noise"
# The summary names a long --output whole (the result's copy holds 511
# bytes of it, and was printed cut short).
long=$tmp
for i in 1 2 3 4 5 6; do long=$long/$(printf '%0100d' 0); done
mkdir -p "$long" || fail "cannot make $long"
"$calibrate" --quick --devices sim --dtype s --output "$long/p.json" >"$tmp/out" 2>"$tmp/err" ||
  fail "calibration to a long path failed: $(cat "$tmp/err")"
last=$(tail -n 1 "$tmp/out")
[ "${last##*; profile: }" = "$long/p.json" ] || fail "the summary cuts a long path: $last"

# A sim calibrated with other settings than the profile's replaces that
# sim's models alone: its settings are not the machine's, and taking it for
# another machine once threw away every other device's calibration.
"$calibrate" --quick --devices sim,sim:rate=2e11 --dtype s --output "$tmp/sims.json" \
  >"$tmp/out" 2>"$tmp/err" || fail "two sims: $(cat "$tmp/err")"
"$calibrate" --quick --devices sim:rate=3e11 --dtype s --output "$tmp/sims.json" \
  >"$tmp/out" 2>"$tmp/err" || fail "a sim of another rate: $(cat "$tmp/err")"
grep -q "another machine" "$tmp/out" && fail "a sim's rate taken for another machine: $(cat "$tmp/out")"
grep -q "^kept from the existing profile: sim1 (s)$" "$tmp/out" ||
  fail "sim1 not kept beside a sim0 of another rate: $(cat "$tmp/out")"
grep -q "^replaced sim0's models, another device's (sim0 is .*3e+11.* but .*1e+11" "$tmp/out" ||
  fail "sim0's old models dropped without a word: $(cat "$tmp/out")"
grep -q '2e+11 flop/s' "$tmp/sims.json" && grep -q '3e+11 flop/s' "$tmp/sims.json" ||
  fail "the profile lacks sim1 or the new sim0: $(cat "$tmp/sims.json")"

# What calibration writes, the reader takes: models the reader would refuse
# (a sim whose calls cost 1000 s each, over the 1 s a profile may hold) are not
# written, and an earlier profile stays. They were, and every later read
# refused the file. A device slower than a profile may hold (a sim of 1e3
# flop/s) is refused before it is measured, the profile kept too.
cp "$tmp/sims.json" "$tmp/slow.json"
"$calibrate" --quick --devices sim:latency=1e3 --dtype s --output "$tmp/slow.json" \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "not written: this POAS would refuse the profile on reading it: .*outside" "$tmp/err" &&
  cmp -s "$tmp/sims.json" "$tmp/slow.json" ||
  fail "models the reader refuses: exit $rc: $(cat "$tmp/err")"
"$calibrate" --quick --devices sim:rate=1e3:drate=1e3 --dtype s --output "$tmp/slow.json" \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "sim0: sgemm runs at 1e+03 flop/s, below the 1e+06 flop/s" "$tmp/err" &&
  cmp -s "$tmp/sims.json" "$tmp/slow.json" ||
  fail "a device too slow for a profile: exit $rc: $(cat "$tmp/err")"

# A copy model is said in the profile's numbers, however slow: a link of
# 2 kB/s and one of 2 ns latency were "0.00 GB/s" and
# "0.00 us", as if copies took no time, or all of it.
"$calibrate" --quick --devices sim:bandwidth=2e3:latency=2e-9 --dtype s \
  --output "$tmp/slowlink.json" >"$tmp/out" 2>"$tmp/err" ||
  fail "a slow link's calibration failed: $(cat "$tmp/err")"
grep -q "^sim0 *h2d .* 0.002 us + 2e-06 GB/s$" "$tmp/out" ||
  fail "a slow link's model misstated: $(cat "$tmp/out")"

"$calibrate" --quick --devices sim:jitter=0.2 --dtype s --output "$tmp/noisy.json" \
  >"$tmp/out" 2>"$tmp/err" || fail "noisy calibration failed: $(cat "$tmp/err")"
grep -q "poas-calibrate: sim0 sgemm: .*machine was busy" "$tmp/err" ||
  fail "a noisy sim not flagged: $(cat "$tmp/out" "$tmp/err")"
grep -q '"timing_noise"' "$tmp/noisy.json" || fail "the noise is not in the profile"

# Simulated devices read a profile only when one is named (make check
# names a missing one): not here.
(unset POAS_PROFILE; "$info" --devices "sim:profile=$tmp/noisy.json") >"$tmp/out" 2>&1 ||
  fail "poas-info: $(cat "$tmp/out")"
grep -q "profile: (none: only simulated devices; sim0 replays the profile its sim:profile=FILE names" \
  "$tmp/out" || fail "poas-info does not say where sim0 takes its models: $(cat "$tmp/out")"
# Without HOME, XDG_DATA_HOME or POAS_PROFILE there is no profile path,
# said once (it read as built-in estimates requested, then as not used).
(unset HOME XDG_DATA_HOME POAS_PROFILE; "$info" --devices cpu) >"$tmp/nohome" 2>&1 ||
  fail "poas-info without HOME: $(cat "$tmp/nohome")"
grep -q "^profile: (none: no profile path: " "$tmp/nohome" &&
  ! grep -q "requested\|not used" "$tmp/nohome" ||
  fail "poas-info without HOME does not say why there is no profile, once: $(cat "$tmp/nohome")"
(unset POAS_PROFILE; "$info" --devices sim) >"$tmp/plain" 2>&1 || fail "poas-info: $(cat "$tmp/plain")"
# Named, it is read, and said to be unused or missing.
"$info" --devices sim >"$tmp/named" 2>&1 || fail "poas-info: $(cat "$tmp/named")"
grep -q "not used: no profile at $POAS_PROFILE" "$tmp/named" ||
  fail "poas-info does not say the named profile is missing: $(cat "$tmp/named")"
grep -q "profile: (none: simulated devices take theirs from sim:profile=FILE)" "$tmp/plain" ||
  fail "poas-info does not say where simulated devices take their models: $(cat "$tmp/plain")"
grep -q "^note: sim0 sgemm: .*machine was busy" "$tmp/out" ||
  fail "poas-info does not flag the noisy profile: $(cat "$tmp/out")"
if command -v python3 >/dev/null 2>&1; then
  "$info" --json --devices "sim:profile=$tmp/noisy.json" >"$tmp/info.json" || fail "poas-info --json"
  python3 - "$tmp/info.json" <<'PYEOF' || fail "poas-info --json: no timing noise past 3%"
import json, sys
doc = json.load(open(sys.argv[1]))
fits = [d["gemm"]["s"]["all"] for d in doc["profile"]["devices"] if d["id"] == "sim0"]
sys.exit(0 if fits and fits[0].get("timing_noise", 0) > 0.03 else 1)
PYEOF
fi

# A malformed selection is a usage error, named by where it came from.
"$info" --devices cpu,cpu >"$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "^poas-info: --devices 'cpu,cpu': .*device 'cpu' selected twice" "$tmp/out" ||
  fail "a device selected twice not refused as a usage error: $(cat "$tmp/out")"
POAS_DEVICES=nodevice "$calibrate" --quick --output "$tmp/never.json" >"$tmp/out" 2>&1
[ $? -eq 2 ] && grep -q "^poas-calibrate: POAS_DEVICES 'nodevice': " "$tmp/out" ||
  fail "a malformed POAS_DEVICES not refused as a usage error: $(cat "$tmp/out")"
# An empty --devices is refused, not taken for every device (a script's
# unset variable once calibrated the whole machine).
for tool in "$calibrate" "$info"; do
  "$tool" --devices '' --output "$tmp/never.json" >"$tmp/out" 2>&1
  [ $? -eq 2 ] && grep -q "^poas-.*: --devices '' names no device" "$tmp/out" ||
    fail "$tool: --devices '' not a usage error: $(cat "$tmp/out")"
done
[ -e "$tmp/never.json" ] && fail "an empty --devices calibrated"
# poas-info shows the profile --profile names, a sim's model as its own,
# and tells how to calibrate a real device that has none.
"$info" --devices cpu,sim --profile "$tmp/quiet.json" >"$tmp/out" 2>&1 ||
  fail "poas-info --profile: $(cat "$tmp/out")"
grep -q "^profile: $tmp/quiet.json" "$tmp/out" &&
  grep -q "^cpu0 .*built-in estimate" "$tmp/out" &&
  grep -q "^sim0 .*simulated: its settings are its model" "$tmp/out" &&
  grep -q "^note: cpu0 plans with rough built-in estimates: run poas-calibrate" "$tmp/out" ||
  fail "poas-info --profile, a sim, an uncalibrated cpu: $(cat "$tmp/out")"
# The pieces an OpenCL device runs its GEMMs in (block=N), calibrated or
# not, in the table and in the JSON.
if "$info" --devices opencl0 >/dev/null 2>&1; then
  "$info" --devices opencl0:block=256 --profile "$tmp/quiet.json" >"$tmp/out" 2>&1 &&
    grep -q "^opencl0 .*runs its GEMMs in pieces: C in 256 x 256 blocks, k in steps of 256" \
      "$tmp/out" || fail "poas-info does not show block=256's pieces: $(cat "$tmp/out")"
  if command -v python3 >/dev/null 2>&1; then
    "$info" --json --devices opencl0:block=256 --profile "$tmp/quiet.json" >"$tmp/info.json" &&
      python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))["profile"]["devices"][0]
assert d["gemm_block"] == {"s": 256, "d": 256}, d["gemm_block"]' "$tmp/info.json" ||
      fail "poas-info --json: no gemm_block of 256: $(cat "$tmp/info.json")"
  fi
fi
"$info" --profile '' >"$tmp/out" 2>&1
[ $? -eq 2 ] || fail "poas-info --profile '' not a usage error: $(cat "$tmp/out")"
if [ -w /dev/full ]; then
  "$info" --json --devices sim >/dev/full 2>/dev/null
  [ $? -eq 1 ] || fail "poas-info: output lost to a full disk, yet exit 0"
  # Past stdio's buffer the write fails inside printf and leaves no errno;
  # on /dev/full that read "Input/output error".
  "${top_builddir:-.}/bench/poas-bench" gemm --help >/dev/full 2>"$tmp/err"
  status=$?
  [ $status -eq 1 ] && grep -q "^poas-bench: cannot write the output: No space left on device" \
    "$tmp/err" || fail "poas-bench gemm --help into /dev/full: $status, $(cat "$tmp/err")"
fi
# Output past stdio's buffer into a file on a full file system: the write
# that failed inside printf left no errno, and the end's report read
# "Input/output error". A tmpfs of 16 KiB, filled, where this may mount
# one (root, outside a container that forbids it).
full="$tmp/fullfs"
if [ "$(id -u)" -eq 0 ] && mkdir "$full" && mount -t tmpfs -o size=16k tmpfs "$full" 2>/dev/null; then
  head -c 65536 /dev/zero >"$full/fill" 2>/dev/null
  "${top_builddir:-.}/bench/poas-bench" gemm --help >"$full/help" 2>"$tmp/err"
  status=$?
  umount "$full"
  [ $status -eq 1 ] && grep -q "^poas-bench: cannot write the output: No space left on device" \
    "$tmp/err" || fail "poas-bench gemm --help into a full file system: $status, $(cat "$tmp/err")"
else
  echo "poas-tools.sh: note: no tmpfs to fill here: a full file system not tried"
fi
# Every program, installed or not, as a user meets it first: --help and
# --version print to stdout and exit 0, an unknown option is refused with
# exit 2 and named. The bench programs that are not installed took no
# --version, and with stdout closed printed their help nowhere, exit 0.
# Programs whose backend is not built are not there, and skipped.
tools_dir=$(dirname "$info")
bench_dir=${top_builddir:-.}/bench
programs=""
for p in "$tools_dir/poas-info" "$tools_dir/poas-plan" "$tools_dir/poas-demo" \
         "$tools_dir/poas-calibrate" "$bench_dir/poas-bench" "$bench_dir/poas-mpi-bench" \
         "$bench_dir/accuracy" "$bench_dir/optimize-bench" "$bench_dir/tasks-overhead" \
         "$bench_dir/cuda-transfer" "$bench_dir/device-copy" "$bench_dir/call-overhead"; do
  [ -x "$p" ] && programs="$programs $p"
done
# poas-mpi-bench runs MPI_Init, and in the sanitizer build Open MPI's own
# allocations left at exit read as leaks on stderr (tests/poas-mpi.sh says
# why no suppression can name them): it runs here through a wrapper of
# the same name with leak checking off, the rest of ASan on.
if [ -x "$bench_dir/poas-mpi-bench" ]; then
  mkdir "$tmp/mpi" || exit 1
  mpi_bench=$(cd "$bench_dir" && pwd)/poas-mpi-bench
  cat >"$tmp/mpi/poas-mpi-bench" <<WRAP || exit 1
#!/bin/sh
ASAN_OPTIONS="\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}detect_leaks=0" exec "$mpi_bench" "\$@"
WRAP
  chmod +x "$tmp/mpi/poas-mpi-bench" || exit 1
  programs=$(echo "$programs" | sed "s|$bench_dir/poas-mpi-bench|$tmp/mpi/poas-mpi-bench|")
fi
for tool in $programs; do
  name=$(basename "$tool")
  "$tool" --help >"$tmp/out" 2>"$tmp/err"
  [ $? -eq 0 ] && grep -q "^Usage: .*$name" "$tmp/out" && [ ! -s "$tmp/err" ] ||
    fail "$name --help: $(cat "$tmp/out" "$tmp/err")"
  "$tool" --version >"$tmp/out" 2>"$tmp/err"
  [ $? -eq 0 ] && grep -q "^$name (POAS) [0-9]" "$tmp/out" && [ ! -s "$tmp/err" ] ||
    fail "$name --version: $(cat "$tmp/out" "$tmp/err")"
  # The programs that read their options with getopt_long say what it
  # refused in its words, in their own name (getopt's own message named
  # the program by its path: libtool's wrapper here), and where to read
  # more, rather than the whole usage; the others, which read a word or
  # two by hand, name the option and their --help in one line.
  "$tool" --no-such-option >"$tmp/out" 2>"$tmp/err"
  rc=$?
  case $name in
  optimize-bench | tasks-overhead | cuda-transfer | poas-bench)
    grep -q "^$name: .*'--no-such-option'.*see $name --help" "$tmp/err" ;;
  *) refused "$name" "unrecognized option '--no-such-option'" ;;
  esac
  said=$?
  [ $rc -eq 2 ] && [ $said -eq 0 ] && [ ! -s "$tmp/out" ] ||
    fail "$name --no-such-option: exit $rc: $(cat "$tmp/out" "$tmp/err")"
done
# Each way getopt_long refuses an option, in its words: a short option
# alone and in a bundle, a missing argument to a long option and to a
# short one, an argument to an option that takes none, and a long option
# abbreviated so that it names two (one abbreviated to one alone is named
# whole, as getopt names it). A subcommand's refusals name it, whose --help
# is the one to read. An operand the tools take none of is said so too,
# and so is a required option left out.
while IFS='|' read -r name args message; do
  tool=$tools_dir/$name
  [ -x "$tool" ] || tool=$tmp/mpi/$name
  [ -x "$tool" ] || tool=$bench_dir/$name
  [ -x "$tool" ] || continue
  case $args in gemm* | plot*) name="$name ${args%% *}" ;; esac
  # shellcheck disable=SC2086
  "$tool" $args >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && refused "$name" "$message" && [ ! -s "$tmp/out" ] ||
    fail "$name $args: exit $rc: $(cat "$tmp/out" "$tmp/err")"
done <<'EOF'
poas-info|-Z|invalid option -- 'Z'
poas-info|-jZ|invalid option -- 'Z'
poas-info|--js=1|option '--json' doesn't allow an argument
poas-plan|--m|option '--m' requires an argument
poas-plan|--m 1 --n 1 --k 1 --dt|option '--dtype' requires an argument
poas-demo|-n|option requires an argument -- 'n'
poas-calibrate|--quick=yes|option '--quick' doesn't allow an argument
poas-bench|gemm --s 64|option '--s' is ambiguous; possibilities: '--sizes' '--shape'
poas-bench|gemm -Zj|invalid option -- 'Z'
poas-bench|plot --plot|option '--plot' requires an argument
poas-mpi-bench|--json=yes|option '--json' doesn't allow an argument
accuracy|--quick -Z|invalid option -- 'Z'
call-overhead|--calls|option '--calls' requires an argument
device-copy|-d|option requires an argument -- 'd'
poas-info|--json extra|unexpected argument 'extra'
poas-calibrate|-q extra|unexpected argument 'extra'
poas-plan|--m 1 --n 1|--m, --n and --k are required
EOF
# A bad value is refused with exit 2 before anything runs, and named
# (the last word of each line). A malformed --devices in device-copy and
# call-overhead was exit 1, and in call-overhead passed over for the
# first device, which was then timed.
while read -r name args; do
  tool=$tools_dir/$name
  [ -x "$tool" ] || tool=$tmp/mpi/$name
  [ -x "$tool" ] || tool=$bench_dir/$name
  [ -x "$tool" ] || continue
  # shellcheck disable=SC2086
  "$tool" $args >"$tmp/out" 2>"$tmp/err"
  rc=$?
  bad=${args##* }
  [ $rc -eq 2 ] && grep -q -- "'$bad'" "$tmp/err" ||
    fail "$name $args: exit $rc: $(cat "$tmp/out" "$tmp/err")"
done <<'EOF'
poas-info --devices nodev
poas-plan --m 1 --n 1 --k 1 --dtype q
poas-demo --calls x
poas-calibrate --dtype q
poas-bench gemm --repeat 0
poas-mpi-bench --repeat 0
accuracy --reps 0
accuracy --devices nodev
optimize-bench extra
tasks-overhead 5 0
cuda-transfer 0
device-copy --devices nodev
device-copy --devices cpu:nokey=1
call-overhead -n x
call-overhead --devices nodev
EOF
# call-overhead times the first device POAS_DEVICES names, as its --help
# says (which named only cuda0 and the first device).
if [ -x "$bench_dir/call-overhead" ]; then
  POAS_DEVICES=sim "$bench_dir/call-overhead" -n 8 --calls 1 >"$tmp/out" 2>&1 &&
    grep -q "^device sim0 " "$tmp/out" || fail "call-overhead under POAS_DEVICES=sim: $(cat "$tmp/out")"
  "$bench_dir/call-overhead" --help | grep -q "the first POAS_DEVICES names" ||
    fail "call-overhead --help does not name POAS_DEVICES"
  # Several devices named with --devices are a mistake, not the first of
  # them (it timed sim0 and said nothing of sim1).
  "$bench_dir/call-overhead" --devices sim,sim -n 8 --calls 1 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && grep -q "selects 2 devices" "$tmp/err" ||
    fail "call-overhead --devices sim,sim: exit $rc: $(cat "$tmp/out" "$tmp/err")"
fi
# device-copy takes its device from POAS_DEVICES, as the tools do: the
# first there with its own memory (it took cuda0 or the first such device
# whatever POAS_DEVICES said). A malformed one is a usage error, named as
# POAS_DEVICES; --devices goes before it. The sim it takes here is
# refused (exit 1): its copies take virtual time, which it timed as some
# 17,000 GB/s.
if [ -x "$bench_dir/device-copy" ]; then
  POAS_DEVICES=cpu,sim "$bench_dir/device-copy" 64K >"$tmp/out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && grep -q "^device-copy: sim0 is simulated: " "$tmp/out" &&
    ! grep -q "GB/s\|^|" "$tmp/out" ||
    fail "device-copy under POAS_DEVICES=cpu,sim: exit $rc: $(cat "$tmp/out")"
  POAS_DEVICES=nodev "$bench_dir/device-copy" 64K >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && grep -q "^device-copy: POAS_DEVICES 'nodev': " "$tmp/err" ||
    fail "device-copy under POAS_DEVICES=nodev: exit $rc: $(cat "$tmp/err")"
  # One with no device of its own memory (cpu) leaves the choice to the
  # default, as when it is not set: it once ended in "cpu0 computes on
  # host memory", exit 1, where the default had a device to time.
  "$bench_dir/device-copy" 64K >"$tmp/out" 2>&1
  rc=$?
  POAS_DEVICES=cpu "$bench_dir/device-copy" 64K >"$tmp/out2" 2>&1
  rc2=$?
  [ $rc2 -eq $rc ] && [ "$(head -n 1 "$tmp/out2")" = "$(head -n 1 "$tmp/out")" ] ||
    fail "device-copy under POAS_DEVICES=cpu: exit $rc2, not $rc as unset: $(cat "$tmp/out2")"
  POAS_DEVICES=nodev "$bench_dir/device-copy" --devices sim 64K >"$tmp/out" 2>&1
  rc=$?
  [ $rc -eq 1 ] && grep -q "^device-copy: sim0 is simulated: " "$tmp/out" ||
    fail "device-copy --devices under POAS_DEVICES: exit $rc: $(cat "$tmp/out")"
  "$bench_dir/device-copy" --help | grep -q "POAS_DEVICES" ||
    fail "device-copy --help does not name POAS_DEVICES"
fi
# A failure names the program, as in every tool: tasks-overhead said
# "poas_init: invalid argument: ..." alone.
if [ -x "$bench_dir/tasks-overhead" ]; then
  POAS_SCHED=x "$bench_dir/tasks-overhead" 1 1 >"$tmp/out" 2>"$tmp/err"
  [ $? -eq 1 ] && grep -q "^tasks-overhead: invalid argument: unknown scheduling policy 'x'" "$tmp/err" ||
    fail "tasks-overhead under POAS_SCHED=x: $(cat "$tmp/err")"
fi
# The options each --help lists are the options the program takes, and
# the README's usage lines name those and no others: each option a --help
# lists is accepted (given a value and followed by an unknown option, so
# that nothing runs: exit 2, and not for the option itself), each option
# the README's Tools section shows for a program is one its --help lists,
# and each one an installed program's --help lists is in that README
# usage (by its long or its short name).
prog_path() {
  for p in "$tools_dir/$1" "$tmp/mpi/$1" "$bench_dir/$1"; do
    [ -x "$p" ] && { echo "$p"; return 0; }
  done
  return 1
}
# "SHORT LONG" for each option of a --help's lines ("-" where it has no
# short name), --help and --version left out.
help_options() {
  sed -n 's/^ \{1,\}\(-[A-Za-z], \)\{0,1\}--\([a-z][a-z-]*\).*/\1 \2/p' |
    sed 's/^\(-[A-Za-z]\), /\1/; s/^ /- /' | grep -v ' help$\| version$'
}
sed -n '/^## Tools$/,/^### Common to every tool$/p' "${top_srcdir:-.}/README.md" | awk '
  {
    line = $0
    if (match(line, /^(\| `|    )(mpirun -np R )?poas-[a-z-]+( gemm| plot)?/)) {
      head = substr(line, RSTART, RLENGTH)
      sub(/^(\| `|    )(mpirun -np R )?/, "", head)
      cur = head
      usage = substr(line, RSTART + RLENGTH)
      if (line ~ /^\|/)
        sub(/`.*/, "", usage)
    } else if (cur != "" && line ~ /^ +\[-/) {
      usage = line
    } else {
      cur = ""
      next
    }
    n = split(usage, w, /[][ |]+/)
    for (i = 1; i <= n; i++)
      if (w[i] ~ /^--?[a-z]/)
        print cur "|" w[i]
  }' | sort -u >"$tmp/readme-options"
[ "$(cut -d'|' -f1 "$tmp/readme-options" | sort -u | wc -l)" -ge 7 ] ||
  fail "the README's Tools section gave no usage lines to check: $(cat "$tmp/readme-options")"
for entry in poas-info poas-plan poas-demo poas-calibrate "poas-bench gemm" "poas-bench plot" \
             poas-mpi-bench accuracy call-overhead device-copy; do
  name=${entry%% *}
  sub=${entry#"$name"}
  tool=$(prog_path "$name") || continue
  # shellcheck disable=SC2086 # $sub is the subcommand, or nothing
  "$tool" $sub --help 2>&1 | help_options >"$tmp/help-options"
  [ -s "$tmp/help-options" ] || fail "$entry --help lists no options"
  while read -r short long; do
    # shellcheck disable=SC2086
    "$tool" $sub "--$long=v" --no-such-option >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc -eq 2 ] && [ ! -s "$tmp/out" ] &&
      ! grep -q "unrecognized option '--$long\|option '--$long' is ambiguous" "$tmp/err" ||
      fail "$entry --help lists --$long, which it does not take: exit $rc: $(cat "$tmp/err")"
  done <"$tmp/help-options"
  grep "^$entry|" "$tmp/readme-options" | cut -d'|' -f2 >"$tmp/readme-one"
  while read -r opt; do
    case $opt in
    --*) grep -q " ${opt#--}\$" "$tmp/help-options" ;;
    *) grep -q "^$opt " "$tmp/help-options" ;;
    esac || fail "the README shows $entry $opt, which its --help does not list"
  done <"$tmp/readme-one"
  if [ -s "$tmp/readme-one" ]; then
    while read -r short long; do
      grep -qx -- "--$long" "$tmp/readme-one" || grep -qx -- "$short" "$tmp/readme-one" ||
        fail "$entry --help lists --$long, which the README's usage of $entry leaves out"
    done <"$tmp/help-options"
  fi
done
# Every program says so when its reader has gone, or its stdout is
# closed, and exits 1: SIGPIPE ended each one without a word (exit 141).
# The pipe's reading end is closed before the program starts, and the
# reason is the pipe's: a help text past stdio's buffer fails inside
# printf, whose errno glibc does not keep for the final flush, which said
# "Input/output error" (poas-bench's) until it asked the pipe
# (tools/stdout-check.h, tool_lost_errno).
for tool in $programs; do
  for arg in --version --help; do
    reason="Broken pipe$"
    if command -v python3 >/dev/null 2>&1; then
      python3 "${top_srcdir:-.}/tests/closed-pipe.py" "$tmp/err" "$tool" $arg >"$tmp/rc" ||
        fail "python3: $(cat "$tmp/err")"
      [ "$(cat "$tmp/rc")" -eq 1 ] && grep -q ": cannot write the output: $reason" "$tmp/err" ||
        fail "$tool $arg to a reader gone: exit $(cat "$tmp/rc"), $(cat "$tmp/err")"
    fi
    "$tool" $arg >&- 2>"$tmp/err"
    [ $? -eq 1 ] && grep -q ": cannot write the output: " "$tmp/err" ||
      fail "$tool $arg with stdout closed: $(cat "$tmp/err")"
  done
done
exit 0

