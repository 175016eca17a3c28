#!/bin/sh
# poas-demo.sh: the README's demo: help, a bad size, a bad call count, a
# stray word, a malformed POAS_DEVICES and matrices larger than the
# machine's memory refused, and small runs on the CPU that print their
# plan, the first call and the warm ones (their median, or the one), each
# call checked exactly; without a profile it says the times are
# estimates, and a profile named by POAS_PROFILE that cannot be read is an
# error (on sim devices too, which are noted not to use a readable one).
# On sim devices, which compute nothing, the results are not checked, and
# the plan printed is the calls' (beta = 0: C is not copied in), its
# makespan the first call's prediction. --profile is POAS_PROFILE's
# equal; an empty --devices and a signed size are refused.
set -u
demo="${top_builddir:-.}/tools/poas-demo"
fail() { echo "poas-demo.sh: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# No profile at all: the default path, under an empty data folder. (The
# tests' POAS_PROFILE names a missing file, which poas-demo refuses on
# simulated devices too.)
unset POAS_PROFILE
XDG_DATA_HOME=$tmp
export XDG_DATA_HOME
# POAS_LOG unset: logging, the library says it instead.
noprofile() { (unset POAS_LOG; "$demo" "$@"); }

"$demo" --help | grep -q "Usage: poas-demo" || fail "--help"
"$demo" --n 0 2>/dev/null
[ $? -eq 2 ] || fail "--n 0 accepted"
"$demo" --calls 0 2>/dev/null
[ $? -eq 2 ] || fail "--calls 0 accepted"
# n = 65536 asks for 48 GiB, which filling under overcommit gave to the
# OOM killer: refused before anything is allocated where the machine has
# less memory, and not tried where it has more.
pages=$(getconf _PHYS_PAGES 2>/dev/null) || pages=
page=$(getconf PAGESIZE 2>/dev/null) || page=
if [ -n "$pages" ] && [ -n "$page" ] && [ $((pages / 1024 * page / 1048576)) -lt 48 ]; then
  out=$("$demo" --devices sim -n 65536 -c 1 2>&1)
  [ $? -eq 1 ] || fail "n=65536 with less than 48 GiB of memory accepted: $out"
  printf '%s' "$out" | grep -q "n=65536: A, B and C need 48.0 GiB, more than this machine's" ||
    fail "n=65536: unclear error: $out"
fi
"$demo" -n 16 -c 1 extra 2>/dev/null
[ $? -eq 2 ] || fail "a stray argument accepted"
out=$(POAS_DEVICES=nodevice "$demo" -n 16 -c 1 2>&1)
[ $? -eq 2 ] || fail "a malformed POAS_DEVICES not a usage error: $out"
printf '%s' "$out" | grep -q "^poas-demo: POAS_DEVICES 'nodevice': " || fail "unclear error: $out"
out=$(noprofile --devices cpu -n 192 2>&1) || fail "run failed: $out"
for line in 'plan for sgemm 192 x 192 x 192' 'first call: ' 'warm calls: 5, median ' \
            "the calls' errors [-+][0-9.]*% to [-+][0-9.]*%, median [-+][0-9.]*%" \
            '0 wrong elements in all 6 calls' 'cpu0 ' \
            'note: no profile at .*: the times of cpu0 are rough built-in estimates'; do
  printf '%s' "$out" | grep -q "$line" || fail "output lacks '$line': $out"
done
out=$(noprofile --devices cpu -n 64 --calls 1 2>&1) || fail "run with one warm call failed: $out"
for line in 'warm call: ' '0 wrong elements in all 2 calls'; do
  printf '%s' "$out" | grep -q "$line" || fail "output lacks '$line': $out"
done

# Only simulated devices read no profile, but one named is still checked.
printf '{"format": "poas-profile", "vers' >"$tmp/truncated.json"
for devices in cpu sim; do
  for bad in "$tmp/missing.json" "$tmp" "$tmp/truncated.json"; do
    out=$(POAS_PROFILE=$bad "$demo" --devices $devices -n 16 -c 1 2>&1)
    [ $? -eq 1 ] || fail "--devices $devices POAS_PROFILE=$bad, which cannot be read, accepted: $out"
    printf '%s' "$out" | grep -q "profile named by POAS_PROFILE cannot be used: .*$bad" ||
      fail "--devices $devices POAS_PROFILE=$bad: unclear error: $out"
  done
done
out=$(POAS_PROFILE="$(dirname "$0")/profiles/good-sim.json" "$demo" --devices sim -n 16 -c 1 2>&1) ||
  fail "a readable profile on sim devices refused: $out"
printf '%s' "$out" |
  grep -q "note: the profile named by POAS_PROFILE is not used: every device selected is simulated" ||
  fail "no note that the profile is unused: $out"

out=$("$demo" --devices sim -n 16 -c 1 2>&1) || fail "a run on sim failed: $out"
printf '%s' "$out" | grep -q 'not checked (sim devices compute nothing)' ||
  fail "a run on sim does not say its results are not checked: $out"
printf '%s' "$out" | grep -q 'wrong elements' && fail "a run on sim counts wrong elements: $out"
printf '%s' "$out" | grep -q ' 0\.0000 s' && fail "small times printed as 0.0000 s: $out"
# The plan printed is the calls' (a plan for beta != 0 would copy C in
# and predict more): a sim's first call predicts the plan's makespan.
out=$("$demo" --devices sim -n 512 -c 1 2>&1) || fail "a run on sim failed: $out"
planned=$(printf '%s\n' "$out" | sed -n 's/^plan for .*predicted makespan \([^ ]*\) s$/\1/p')
first=$(printf '%s\n' "$out" | sed -n 's/^first call: .*, predicted \([^ ]*\) s .*/\1/p')
[ -n "$planned" ] && [ "$planned" = "$first" ] ||
  fail "the plan printed ($planned s) is not the first call's ($first s): $out"
# The warm calls' median, recomputed: with two calls (a jittery sim, whose
# virtual times are exact) it is the mean of both, as poas-bench and
# bench/accuracy take an even count's; its rate is 2n^3 over it, its error
# (predicted - median) / median, all within the printed digits. It read the
# faster call's time, its rate and error, the calls' own errors' median
# beside it the mean of both.
for calls in 2 3; do
  out=$("$demo" --devices sim:jitter=0.3 -n 256 -c $calls 2>&1) || fail "a run on sim failed: $out"
  printf '%s\n' "$out" | sed -n 's/^warm calls: [0-9]*, median \([^ ]*\) s (\([^-]*\)-\([^ ]*\) s), \([^ ]*\) GFLOP\/s, predicted \([^ ]*\) s (error \([^%]*\)%.*/\1 \2 \3 \4 \5 \6/p' |
    awk -v calls=$calls 'function abs(x) { return x < 0 ? -x : x }
      { found = 1; med = $1; lo = $2; hi = $3; rate = $4; pred = $5; err = $6
        if (calls == 2 && abs(med - (lo + hi) / 2) > 1e-3 * med) bad = bad " median"
        if (!(lo <= med && med <= hi)) bad = bad " range"
        if (abs(rate - 2 * 256 ^ 3 / med / 1e9) > 0.05 + 1e-3 * rate) bad = bad " rate"
        if (abs(err - 100 * (pred - med) / med) > 0.2) bad = bad " error" }
      END { if (!found) bad = " no line"; if (bad) { print bad; exit 1 } }' >"$tmp/bad" ||
    fail "--calls $calls: the warm calls' numbers disagree ($(cat "$tmp/bad")): $out"
done

# --profile names the profile as POAS_PROFILE does, and is checked the
# same way; an empty --devices and a signed size are usage errors.
"$demo" --devices cpu -n 16 -c 1 --profile "$tmp/none.json" >"$tmp/out" 2>&1
[ $? -eq 1 ] && grep -q "the profile named by --profile cannot be used: no profile at $tmp/none.json" \
  "$tmp/out" || fail "--profile of a missing file: $(cat "$tmp/out")"
for args in "--devices ''" "-n +16" "--profile ''"; do
  eval "\"\$demo\" -n 16 -c 1 $args" >"$tmp/out" 2>&1
  [ $? -eq 2 ] || fail "$args not a usage error: $(cat "$tmp/out")"
done
if [ -w /dev/full ]; then
  "$demo" --devices sim -n 16 -c 1 >/dev/full 2>/dev/null
  [ $? -eq 1 ] || fail "output lost to a full disk, yet exit 0"
fi
# A call that fails ends the demo with 1 and says why, its memory freed
# (LeakSanitizer, in a sanitizer build, found A, B, C and the reports
# left behind, and changed the exit status).
POAS_FAULT=sim0:after=1 "$demo" --devices sim -n 16 -c 1 >"$tmp/out" 2>&1
[ $? -eq 1 ] && grep -q "^poas-demo: sgemm: device operation failed" "$tmp/out" ||
  fail "a failed call: $(cat "$tmp/out")"
# A device that fails at its first operation in every call computed
# nothing, and its row is still shown, marked, with no error beside it;
# the device that took its work was planned none, and has no error either
# (the rows read +2079463.6% and -100%; the failed one was left out).
POAS_FAULT=sim0:after=0 "$demo" --devices sim,sim -n 256 -c 2 >"$tmp/out" 2>&1
[ $? -eq 0 ] && grep -q "^sim0 .* - .*(failed; its work moved)$" "$tmp/out" &&
  ! grep -q "^sim[01] .*%.*%" "$tmp/out" ||
  fail "a device failing at once: $(cat "$tmp/out")"
exit 0
