#!/bin/sh
# poas-plan.sh: the poas-plan tool: help, the JSON fields scripts rely on,
# the same plan twice, --beta 0 leaving C's copy out, and clear errors for a malformed --devices and an
# empty --profile (exit 2), for a problem that fits nowhere, for sizes whose matrices no 64-bit
# size holds, and for a profile named by --profile that cannot be read
# (on simulated devices too, which are noted not to use a readable one);
# without a profile, devices planned with built-in estimates are said to
# be. An empty C is said to be one, an empty --devices and sizes with
# spaces or signs are refused, and ties keep the fastest device alone.
set -u
plan="${top_builddir:-.}/tools/poas-plan"
fail() { echo "poas-plan.sh: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# The tests' POAS_PROFILE names a missing file, which poas-plan refuses on
# simulated devices too: here a profile is named only where one is meant,
# and the default path lies in an empty data folder.
unset POAS_PROFILE
XDG_DATA_HOME=$tmp
export XDG_DATA_HOME

"$plan" --help | grep -q "Usage: poas-plan" || fail "--help"
"$plan" --version | grep -q "poas-plan (POAS)" || fail "--version"
"$plan" --m 10 2>/dev/null && fail "missing --n/--k accepted"

devs='sim:rate=1e9:latency=0:bandwidth=1e18,sim:rate=3e9:latency=0:bandwidth=1e18,sim:rate=1e3'
out=$("$plan" --m 4096 --n 1024 --k 1024 --devices "$devs" --json) || fail "--json failed"
for key in '"makespan_s": ' '"devices": \[' '"id": "sim0"' '"share": 0.25' '"share": 0.75' \
           '"predicted_s": ' '"corun": 1}' '"excluded": \[' '"id": "sim2", "reason": "adds no speed'; do
  printf '%s' "$out" | grep -q "$key" || fail "JSON lacks $key: $out"
done
again=$("$plan" --m 4096 --n 1024 --k 1024 --devices "$devs" --json)
[ "$out" = "$again" ] || fail "two plans of the same problem differ"
"$plan" --m 4096 --n 1024 --k 1024 --dtype d --devices "$devs" | grep -q "left out" ||
  fail "table lacks the devices left out"

# --beta 0 plans C = A B: C is not copied in, so the H2D bytes drop by
# C's (here 1024 x 1024 floats, all on one sim); the JSON gives the beta.
h2d() { printf '%s' "$1" | sed -n 's/.*"bytes_h2d": \([0-9]*\).*/\1/p'; }
one='sim:rate=1e9:latency=0:bandwidth=1e9'
with_c=$("$plan" --m 1024 --n 1024 --k 64 --devices "$one" --json) || fail "--json failed"
without_c=$("$plan" --m 1024 --n 1024 --k 64 --beta 0 --devices "$one" --json) ||
  fail "--beta 0 failed"
[ "$(h2d "$with_c")" -eq $(($(h2d "$without_c") + 1024 * 1024 * 4)) ] ||
  fail "--beta 0 does not leave C's copy in out: $with_c / $without_c"
printf '%s' "$without_c" | grep -q '"beta": 0,' || fail "JSON lacks the beta: $without_c"
printf '%s' "$with_c" | grep -q '"beta": 1,' || fail "JSON lacks the default beta: $with_c"
"$plan" --m 8 --n 8 --k 8 --beta 0 --devices sim | grep -q "^sgemm m=8 n=8 k=8 beta=0:" ||
  fail "the table does not name the beta"
# Plain decimals only, as every tool's numbers: strtod took the rest.
for bad in x 1e999 nan '' ' 1' +1 0x1 inf; do
  err=$("$plan" --m 8 --n 8 --k 8 --beta "$bad" --devices sim 2>&1)
  [ $? -eq 2 ] || fail "--beta '$bad' not a usage error: $err"
  printf '%s' "$err" | grep -q "bad value '$bad' for --beta" || fail "unclear error: $err"
done
"$plan" --m 8 --n 8 --k 8 --beta -0.5 --devices sim --json | grep -q '"beta": -0.5,' ||
  fail "a negative --beta refused"
"$plan" --m 8 --n 8 --k 8 --beta 1e-320 --devices sim >/dev/null 2>&1 ||
  fail "a --beta too small for a normal double refused"

err=$("$plan" --m 8 --n 8 --k 8 --devices nodevice 2>&1)
[ $? -eq 2 ] || fail "a malformed --devices not a usage error: $err"
printf '%s' "$err" | grep -q "^poas-plan: --devices 'nodevice': " || fail "unclear error: $err"

err=$("$plan" --m 100000 --n 100000 --k 1000 --devices sim:memory=1Mi 2>&1)
[ $? -eq 1 ] || fail "a problem that fits nowhere did not fail"
printf '%s' "$err" | grep -q "fits nowhere" || fail "unclear error: $err"

# Planning it once never ended: a time limit where the system has one.
limit=; command -v timeout >/dev/null 2>&1 && limit="timeout 60"
err=$($limit "$plan" --m 9223372036854775807 --n 1 --k 1 --devices sim 2>&1)
[ $? -eq 1 ] || fail "sizes that overflow were not refused: $err"
printf '%s' "$err" | grep -q "sizes too large (m=9223372036854775807 n=1 k=1)" ||
  fail "unclear error for sizes that overflow: $err"

# Only simulated devices read no profile, but one named is still checked.
printf '{"format": "poas-profile", "vers' >"$tmp/truncated.json"
for devices in cpu sim; do
  for bad in "$tmp/missing.json" "$tmp" "$tmp/truncated.json"; do
    err=$("$plan" --m 64 --n 64 --k 64 --devices $devices --profile "$bad" 2>&1)
    [ $? -eq 1 ] || fail "--devices $devices --profile $bad, which cannot be read, accepted: $err"
    printf '%s' "$err" | grep -q "profile named by --profile cannot be used: .*$bad" ||
      fail "--devices $devices --profile $bad: unclear error: $err"
  done
done
# An empty --profile names no file; it was taken as no profile, silently.
err=$("$plan" --m 64 --n 64 --k 64 --devices cpu --profile '' 2>&1)
[ $? -eq 2 ] || fail "--profile '' not a usage error: $err"
printf '%s' "$err" | grep -q "^poas-plan: --profile '' names no file" || fail "unclear error: $err"
good="$(dirname "$0")/profiles/good-sim.json"
"$plan" --m 64 --n 64 --k 64 --devices sim --profile "$good" >/dev/null 2>"$tmp/err" ||
  fail "a readable profile on sim devices refused: $(cat "$tmp/err")"
grep -q "note: the profile named by --profile is not used: every device selected is simulated" \
  "$tmp/err" || fail "no note that the profile is unused: $(cat "$tmp/err")"
out=$(unset POAS_LOG; "$plan" --m 64 --n 64 --k 64 --devices cpu --json 2>"$tmp/err") ||
  fail "a plan without a profile failed"
printf '%s' "$out" | grep -q '"estimated": true' ||
  fail "a device without a calibrated model is not marked estimated: $out"
grep -q "note: no profile at .*: the times of cpu0 are rough built-in estimates" "$tmp/err" ||
  fail "no note that the times are estimates: $(cat "$tmp/err")"
printf '%s' "$("$plan" --m 64 --n 64 --k 64 --devices sim --json)" |
  grep -q '"estimated": false' || fail "a sim's exact model marked estimated"

# An empty C is said to be one; an empty --devices and a size with a
# space or a sign ("-0" too, which was taken as 0) are usage errors.
out=$("$plan" --m 0 --n 64 --k 64 --devices sim) || fail "m = 0 failed"
printf '%s' "$out" | grep -q "C is empty, nothing to plan or run" || fail "m = 0: $out"
for args in "--devices ''" "--m ' 64'" "--m -0" "--m +64"; do
  eval "\"\$plan\" --n 64 --k 64 --m 64 $args" >"$tmp/out" 2>&1
  [ $? -eq 2 ] || fail "$args not a usage error: $(cat "$tmp/out")"
done
grep -q "bad value '+64' for --m" "$tmp/out" || fail "+64: $(cat "$tmp/out")"
# With ties in the shares the fastest device is kept alone (the first
# listed, the slower, once was).
"$plan" --m 64 --n 64 --k 64 --beta 0 --devices sim:rate=1e11,sim:rate=1e12 >"$tmp/out" 2>&1 ||
  fail "64^3 on two sims: $(cat "$tmp/out")"
grep -q "^sim1 " "$tmp/out" && grep -q "^  sim0 .*adds nothing" "$tmp/out" ||
  fail "64^3 kept the slower sim: $(cat "$tmp/out")"
# Its two times print apart: the H100 replay's said "245 ms, less than the
# 245 ms" of the plan.
h100=$top_srcdir/models/profiles/nvidia-h100-80gb-16c.json
"$plan" --m 16384 --n 16384 --k 16384 \
  --devices "sim:profile=$h100#cpu0,sim:profile=$h100#cuda0" >"$tmp/out" 2>&1 ||
  fail "16384^3 on the H100 replay: $(cat "$tmp/out")"
sed -n 's/.*adds nothing: .* predicted \([0-9.e+]*\) ms .* the \([0-9.e+]*\) ms .*/\1 \2/p' "$tmp/out" |
  awk 'NF == 2 && $1 != $2 { ok = 1 } END { exit !ok }' ||
  fail "times that print alike: $(cat "$tmp/out")"
if [ -w /dev/full ]; then
  "$plan" --m 8 --n 8 --k 8 --devices sim --json >/dev/full 2>/dev/null
  [ $? -eq 1 ] || fail "output lost to a full disk, yet exit 0"
fi
# A device too small to add anything, without which the solve comes out
# shorter (its tiles' fixed costs): the reason read "grows -1.7%".
devs='sim:rate=1e11:latency=1e-5,sim:rate=1e11:latency=1e-5,sim:rate=1e9'
out=$("$plan" --m 256 --n 3000 --k 16 --beta 1 --devices "$devs") || fail "a small device: $out"
printf '%s' "$out" | grep -q "this small the predicted time shrinks [0-9.]*%$" &&
  ! printf '%s' "$out" | grep -q "grows -" || fail "a small device's reason: $out"
# A device left out split by columns, where the plan then turned to rows,
# keeps its verdict and says where it was judged. The replayed cuda0 holds
# 21 MiB: B (16 MiB) shared and one tile of rows, where split by columns
# its tiles of B take two, whose copies overlap both ways. (A 16 x 8192 x
# 256 dgemm on a cuda0 of 80 GiB turned only while one tile's copies were
# charged the duplex factor; its case, a device that added nothing once
# said to have "gained less than the models' error" allows, has none left
# here.)
epyc=$top_srcdir/models/profiles/amd-epyc-2c.json
out=$("$plan" --m 16 --n 8192 --k 256 --dtype d \
  --devices "sim:profile=$epyc#opencl0,sim:profile=$h100#cuda0:memory=21Mi" 2>&1) ||
  fail "a turned plan: $out"
printf '%s' "$out" | grep -q "sim0 *adds too little: left out split by columns, where it gained less than the models' error and the runtime's cost allow; the plan was then split by rows" ||
  fail "a turned plan's reason: $out"
exit 0
