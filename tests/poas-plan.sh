#!/bin/sh
# poas-plan.sh: the poas-plan tool: help, the JSON fields scripts rely on,
# the same plan twice, and a clear error for a problem that fits nowhere.
set -u
plan="${top_builddir:-.}/tools/poas-plan"
fail() { echo "poas-plan.sh: $*" >&2; exit 1; }

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

err=$("$plan" --m 100000 --n 100000 --k 1000 --devices sim:memory=1Mi 2>&1)
[ $? -eq 1 ] || fail "a problem that fits nowhere did not fail"
printf '%s' "$err" | grep -q "fits nowhere" || fail "unclear error: $err"
exit 0
