#!/bin/sh
# poas-mpi.sh: poas-mpi-bench under mpirun on this one machine: two ranks
# on real CPU devices split the rows of C between them, the result is
# right in s and d, and the transfers are predicted from the link measured
# at start; two ranks of simulated devices, one three times the other's
# rate, get the rows in that ratio and measure what they predicted;
# a rank too slow for a granule of rows takes none;
# a bad argument or device selection ends every rank with exit status 2,
# said once, and a run failing on one rank or all of them, or one that no
# rank can plan, with 1, said once; in an MPMD job problems (--sizes, --dtype, --repeat)
# unlike rank 0's end every rank with 2; operands past the machine's
# memory end every rank with 1 before they are allocated; --help and
# --version fail when their output cannot be written. Skips (77) where poas-mpi-bench is not built
# (configure found no Open MPI) or mpirun cannot start two processes here.
set -u
bench="${top_builddir:-.}/bench/poas-mpi-bench"
fail() { echo "poas-mpi.sh: $*" >&2; exit 1; }
[ -x "$bench" ] || { echo "poas-mpi.sh: skip: poas-mpi-bench not built (no Open MPI)"; exit 77; }
command -v mpirun >/dev/null || { echo "poas-mpi.sh: skip: no mpirun"; exit 77; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# Open MPI refuses root unless told twice; CI runs as root.
if [ "$(id -u)" -eq 0 ]; then
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
fi
# The tests' POAS_PROFILE names a missing file: the ranks plan on estimates.
unset POAS_PROFILE
XDG_DATA_HOME=$tmp
export XDG_DATA_HOME
# In the sanitizer build, Open MPI's own allocations left at exit (some
# 3300, many from plugins already unloaded, so no suppression can name
# them) would read as leaks: leak checking is off here, the rest of ASan on.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
# A job whose ranks exit non-zero (most of the checks below) made Open MPI
# 4.1 wait 2 s before killing what was left of it, whatever was left: the
# script took 41 s on the CI machine class, and 12 s without the wait.
# Every rank here ends by itself, so nothing is left to wait for.
OMPI_MCA_odls_base_sigkill_timeout=0
export OMPI_MCA_odls_base_sigkill_timeout
# No --oversubscribe: mpirun then binds each rank to a core of its own
# (its default for two), as on a real cluster; a machine of one core skips.
mpi() { timeout 300 mpirun "$@"; }
mpi -np 2 true >"$tmp/out" 2>"$tmp/err" ||
  { echo "poas-mpi.sh: skip: mpirun cannot start two processes here: $(cat "$tmp/err")"; exit 77; }
# --version speaks after MPI_Init: silence and a failure mean MPI itself
# cannot start here (a container without what its transports need).
if ! mpi -np 2 "$bench" --version >"$tmp/out" 2>"$tmp/err"; then
  grep -q 'poas-mpi-bench' "$tmp/out" "$tmp/err" && fail "--version: $(cat "$tmp/err")"
  echo "poas-mpi.sh: skip: MPI cannot start here: $(cat "$tmp/err")"
  exit 77
fi
[ "$(grep -c 'poas-mpi-bench (POAS)' "$tmp/out")" -eq 1 ] || fail "--version not said once: $(cat "$tmp/out")"
mpi -np 1 "$bench" --help | grep -q "^Usage: mpirun -np R poas-mpi-bench" || fail "--help"
# Help and version that cannot be written fail (1). Run alone, as an MPI
# singleton: under mpirun a rank writes to mpirun's forwarding, and Open
# MPI's mpirun exits 0 when its own write fails.
if [ -w /dev/full ] && timeout 60 "$bench" --version >/dev/null 2>&1; then
  for opt in --help --version; do
    timeout 60 "$bench" $opt >/dev/full 2>"$tmp/err"
    [ $? -eq 1 ] || fail "$opt >/dev/full: not exit 1: $(cat "$tmp/err")"
    grep -q "^poas-mpi-bench: cannot write the output" "$tmp/err" ||
      fail "$opt >/dev/full: unclear error: $(cat "$tmp/err")"
  done
else
  echo "poas-mpi.sh: note: no /dev/full or no MPI singleton here: output failures not tried"
fi

# Real devices: each rank one CPU thread.
for dtype in s d; do
  mpi -np 2 "$bench" --sizes 256,200x120x72 --dtype $dtype --repeat 1 --devices cpu:threads=1 \
    --json >"$tmp/real.json" 2>"$tmp/err" || fail "--dtype $dtype: $(cat "$tmp/err")"
  python3 - "$tmp/real.json" <<'PYEOF' || fail "--dtype $dtype: $(cat "$tmp/real.json" "$tmp/err")"
import json, sys
out = json.load(open(sys.argv[1]))
assert out["ranks"] == 2 and len(out["problems"]) == 2, out
# The link to rank 1, measured at start, predicts the transfers.
link = out["links"][0]
assert link["rank"] == 1 and link["latency_s"] > 0 and link["bandwidth"] > 0, out
for p in out["problems"]:
    at = 0
    for r in p["split"]:
        assert r["first"] == at and r["count"] >= 0, p
        at += r["count"]
        assert r["devices"] == "cpu0", p
    assert at == p["m"], p
    assert p["checked"] is True, p
    assert 0 <= p["numerical_error"] <= p["error_bound"], p
    assert p["end_to_end_s"] > 0 and p["compute_s"] > 0, p
    assert p["predicted_scatter_s"] > 0 and p["predicted_gather_s"] > 0, p
    assert p["predicted_end_to_end_s"] == p["predicted_scatter_s"] + p["predicted_s"] + \
        p["predicted_gather_s"] or abs(p["predicted_end_to_end_s"] / (p["predicted_scatter_s"] +
        p["predicted_s"] + p["predicted_gather_s"]) - 1) < 1e-6, p
PYEOF
done

# The library's warnings (POAS_LOG=1), which every rank meets alike here
# (no profile), are said once for the ranks, through the log handler; each
# rank printed its own before. Debug messages come as made, named for
# their rank.
POAS_LOG=1 mpi -np 2 -x POAS_LOG "$bench" --sizes 64 --repeat 1 --devices cpu:threads=1 \
  >"$tmp/out" 2>"$tmp/err" || fail "POAS_LOG=1: $(cat "$tmp/err")"
[ "$(grep -c "poas: warning: no profile at" "$tmp/err")" -eq 1 ] &&
  grep -q "^poas-mpi-bench (ranks 0-1): poas: warning: no profile at" "$tmp/err" ||
  fail "POAS_LOG=1: the library's warning not said once for both ranks: $(cat "$tmp/err")"
# The output opens with the table; a blank line came first once.
[ "$(head -n 1 "$tmp/out")" = "sgemm 64 x 64 x 64 on 2 ranks" ] ||
  fail "the output does not open with the table: $(head -n 3 "$tmp/out")"
# More warnings than one rank's say_once gathers (1 KiB): 19 of 20 sims
# fail at once, two lines each. They were cut mid-line and the rest lost;
# each is now said whole, the ones past the room on the rank's own stderr.
faults=$(for i in $(seq 0 18); do printf 'sim%d:after=0,' "$i"; done)
POAS_FAULT=${faults%,} POAS_LOG=1 mpi -np 2 -x POAS_LOG -x POAS_FAULT "$bench" --sizes 1024 \
  --repeat 1 --devices "$(printf 'sim,%.0s' $(seq 19))sim" >"$tmp/out" 2>"$tmp/err" ||
  fail "20 sims, 19 failing: $(cat "$tmp/err")"
! grep "poas: warning:" "$tmp/err" | grep -v -E '\(POAS_FAULT\)$|other devices$' | grep -q . &&
  grep -q "^poas-mpi-bench (rank[s 0-9-]*): poas: warning: sim18 failed (device operation failed): its unfinished work moves to the other devices$" "$tmp/err" ||
  fail "warnings past 1 KiB cut or lost: $(head -c 3000 "$tmp/err")"
POAS_LOG=3 mpi -np 2 -x POAS_LOG "$bench" --sizes 512 --repeat 1 --devices sim,sim \
  >"$tmp/out" 2>"$tmp/err" || fail "POAS_LOG=3: $(cat "$tmp/err")"
grep -q "^poas (rank 0): debug: " "$tmp/err" && grep -q "^poas (rank 1): debug: " "$tmp/err" &&
  ! grep -q "^poas: " "$tmp/err" ||
  fail "POAS_LOG=3: debug messages not named for their ranks: $(head -c 2000 "$tmp/err")"

# Two ranks, each on one sim of the rate given, at 2048: the JSON into
# $tmp/sim.json, stderr into $tmp/err.
two_sims() {
  mpi -np 1 -x POAS_DEVICES=sim:rate=$1 "$bench" --sizes 2048 --repeat 1 --json : \
    -np 1 -x POAS_DEVICES=sim:rate=$2 "$bench" --sizes 2048 --repeat 1 --json \
    >"$tmp/sim.json" 2>"$tmp/err" || fail "sims $1 : $2: $(cat "$tmp/err")"
}

# Simulated ranks of 1e11 and 3e11 flop/s: a 1 : 3 split, predicted as run.
two_sims 1e11 3e11
python3 - "$tmp/sim.json" <<'PYEOF' || fail "sims: $(cat "$tmp/sim.json")"
import json, sys
p = json.load(open(sys.argv[1]))["problems"][0]
assert [r["count"] for r in p["split"]] == [512, 1536], p
assert p["checked"] is False and p["numerical_error"] is None, p
for r in p["split"]:
    assert abs(r["prediction_error"]) < 0.02, p
# The end to end holds the GEMMs' virtual seconds, with the copies' real
# ones around them (it was the wall clock's alone: 0.008 s around 0.045).
assert p["end_to_end_s"] >= p["compute_s"], p
# The ranks leave the barrier apart: the gather, what rank 0 waits past the
# last GEMM's end, once came out negative where it took less than that.
assert p["gather_s"] >= 0 and p["scatter_s"] >= 0, p
assert abs(p["end_to_end_s"] - (p["compute_s"] + p["scatter_s"] + p["gather_s"])) \
    < 0.2 * p["end_to_end_s"], p
PYEOF
grep -q "result not checked: a rank computed on simulated devices" "$tmp/err" ||
  fail "sims: the table does not say the result is not checked: $(cat "$tmp/err")"
# Ranks of 1e12 and 1e10 flop/s: the slow one's share, 0.63 of a granule
# of 32 rows, is none; it once got a whole granule by largest remainder,
# which took it 0.028 s, where the fast rank ends all 2048 rows in 0.020.
two_sims 1e12 1e10
python3 - "$tmp/sim.json" <<'PYEOF' || fail "sims 100 : 1: $(cat "$tmp/sim.json")"
import json, sys
p = json.load(open(sys.argv[1]))["problems"][0]
assert [r["count"] for r in p["split"]] == [2048, 0], p
PYEOF

# Usage errors end every rank with 2, said by rank 0 alone: an option
# refused in the program's own name (not its path, as getopt gave it), with
# where to read more and not the whole usage.
mpi -np 2 "$bench" --bogus >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && [ ! -s "$tmp/out" ] || fail "--bogus: not exit 2: $(cat "$tmp/out" "$tmp/err")"
[ "$(grep -c "^poas-mpi-bench: unrecognized option '--bogus'\$" "$tmp/err")" -eq 1 ] &&
  [ "$(grep -c "^Try 'poas-mpi-bench --help' for more information.\$" "$tmp/err")" -eq 1 ] &&
  ! grep -q "Usage" "$tmp/err" || fail "--bogus: not said once, in one line: $(cat "$tmp/err")"
mpi -np 2 "$bench" --sizes x >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] || fail "--sizes x: not exit 2: $(cat "$tmp/err")"
[ "$(grep -c "bad --sizes 'x'" "$tmp/err")" -eq 1 ] || fail "--sizes x: not said once: $(cat "$tmp/err")"
# Empty entries, spaces and '+' in --sizes are refused, not skipped or read.
for sizes in 256, ,256 64,,128 ' 256' +8x8x8 '8x 8x8' 8x+8x8; do
  mpi -np 2 "$bench" --sizes "$sizes" --repeat 1 --devices sim >"$tmp/out" 2>"$tmp/err"
  [ $? -eq 2 ] || fail "--sizes '$sizes': not exit 2: $(cat "$tmp/err")"
  [ "$(grep -c "bad --sizes '$sizes'" "$tmp/err")" -eq 1 ] ||
    fail "--sizes '$sizes': not said once: $(cat "$tmp/err")"
done
mpi -np 2 "$bench" --devices '' --sizes 64 --repeat 1 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] || fail "--devices '': not exit 2: $(cat "$tmp/err")"
[ "$(grep -c "poas-mpi-bench: --devices '' names no device" "$tmp/err")" -eq 1 ] ||
  fail "--devices '': not said once: $(cat "$tmp/err")"
# An empty --profile in the tools' words (it was "bad --profile ''" here).
mpi -np 2 "$bench" --profile '' --sizes 64 --repeat 1 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] || fail "--profile '': not exit 2: $(cat "$tmp/err")"
[ "$(grep -c "poas-mpi-bench: --profile '' names no file" "$tmp/err")" -eq 1 ] ||
  fail "--profile '': not said once: $(cat "$tmp/err")"
# A device selection every rank was given is said once for them all (each
# rank once said it for itself).
mpi -np 2 "$bench" --devices nodevice >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] || fail "--devices nodevice: not exit 2: $(cat "$tmp/err")"
[ "$(grep -c "nodevice" "$tmp/err")" -eq 1 ] &&
  grep -q "^poas-mpi-bench (ranks 0-1): --devices 'nodevice': " "$tmp/err" ||
  fail "--devices nodevice: not said once for ranks 0-1: $(cat "$tmp/err")"

# An MPMD job gives each rank its own command line: a bad option on one rank
# alone ends every rank with 2 (it once left the others waiting for good,
# in collectives the failed rank never joined), and that rank says why.
for bad in --bogus "--sizes x"; do
  mpi -np 1 -x POAS_DEVICES=sim "$bench" --sizes 64 --repeat 1 : \
    -np 1 -x POAS_DEVICES=sim "$bench" --repeat 1 $bad >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] || fail "rank 1 alone given $bad: not exit 2 (exit $rc): $(cat "$tmp/err")"
  grep -q -e "^poas-mpi-bench: unrecognized option '--bogus'" -e "bad --sizes 'x'" "$tmp/err" ||
    fail "rank 1 alone given $bad: not said: $(cat "$tmp/err")"
done

# Rank 0's --help beside rank 1's bad option: exit 2, and rank 1 says why.
timeout 60 mpirun -np 1 -x POAS_DEVICES=sim "$bench" --help : \
  -np 1 -x POAS_DEVICES=sim "$bench" --bogus >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] || fail "rank 0 --help, rank 1 --bogus: not exit 2 (exit $rc): $(cat "$tmp/err")"
grep -q "^poas-mpi-bench: unrecognized option '--bogus'" "$tmp/err" &&
  grep -q "^Try 'poas-mpi-bench --help' for more information." "$tmp/err" ||
  fail "rank 0 --help, rank 1 --bogus: not said: $(cat "$tmp/err")"

# Each rank of an MPMD job may name its own devices, but not its own
# problems: --sizes, --dtype or --repeat unlike rank 0's end every rank
# with 2, said by that rank (other sizes once overran a rank's buffers in
# the scatter, and another --repeat left the ranks waiting for good).
for other in "--sizes 128" "--dtype d" "--repeat 2"; do
  timeout 60 mpirun -np 1 -x POAS_DEVICES=sim "$bench" --sizes 256 --repeat 1 : \
    -np 1 -x POAS_DEVICES=sim "$bench" --sizes 256 --repeat 1 $other >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] || fail "rank 1 alone given $other: not exit 2 (exit $rc): $(cat "$tmp/err")"
  [ "$(grep -c "(rank 1): its --sizes, --dtype or --repeat differ from rank 0's" "$tmp/err")" -eq 1 ] ||
    fail "rank 1 alone given $other: not said once: $(cat "$tmp/err")"
done

# A run that fails on one rank, or on all, ends every rank with 1, said
# once (each rank once said the same failure for itself).
mpi -np 1 -x POAS_DEVICES=sim "$bench" --sizes 64 --repeat 1 : \
  -np 1 -x POAS_DEVICES=sim -x POAS_FAULT=sim0:after=0 "$bench" --sizes 64 --repeat 1 \
  >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "rank 1's device failing: not exit 1: $(cat "$tmp/err")"
[ "$(grep -c "gemm failed" "$tmp/err")" -eq 1 ] &&
  grep -q "^poas-mpi-bench (rank 1): gemm failed: " "$tmp/err" ||
  fail "rank 1's device failing: not said once: $(cat "$tmp/err")"
POAS_FAULT=sim0:after=0 mpi -np 2 -x POAS_FAULT "$bench" --sizes 64 --repeat 1 --devices sim \
  >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "every rank's device failing: not exit 1: $(cat "$tmp/err")"
[ "$(grep -c "gemm failed" "$tmp/err")" -eq 1 ] &&
  grep -q "^poas-mpi-bench (ranks 0-1): gemm failed: " "$tmp/err" ||
  fail "every rank's device failing: not said once: $(cat "$tmp/err")"

# A problem that no rank can plan (a device too small for it) is not run:
# exit 1, said once (each rank once took an even share anyway, said it
# "takes no rows", and then that its GEMM failed).
mpi -np 2 "$bench" --sizes 512 --repeat 1 --devices sim:memory=1e5 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "no rank's plan: not exit 1: $(cat "$tmp/err")"
[ "$(grep -c "no plan for 512 x 512 x 512" "$tmp/err")" -eq 1 ] &&
  ! grep -q -e "takes no rows" -e "gemm failed" "$tmp/err" ||
  fail "no rank's plan: not said once, or run anyway: $(cat "$tmp/err")"

# Operands past the machine's memory are refused before they are allocated
# (malloc may take them, and filling them would wake the OOM killer): exit
# 1, said once for the node, whose two ranks would hold 5.5 TiB here.
mpi -np 2 "$bench" --sizes 1000000x1000000x1 --devices sim >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "1000000x1000000x1: not exit 1: $(cat "$tmp/err")"
said='1000000 x 1000000 x 1: the operands held on .* (2 ranks) need .* more than this machine'
[ "$(grep -c "$said" "$tmp/err")" -eq 1 ] ||
  fail "1000000x1000000x1: not said once, or unclear: $(cat "$tmp/err")"
exit 0
