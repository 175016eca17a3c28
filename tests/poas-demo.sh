#!/bin/sh
# poas-demo.sh: the README's demo: help, a bad size and a bad call count
# refused, and small runs on the CPU that print their plan, the first call
# and the warm ones (their median, or the one), each call checked exactly.
set -u
demo="${top_builddir:-.}/tools/poas-demo"
fail() { echo "poas-demo.sh: $*" >&2; exit 1; }

"$demo" --help | grep -q "Usage: poas-demo" || fail "--help"
"$demo" --n 0 2>/dev/null
[ $? -eq 2 ] || fail "--n 0 accepted"
"$demo" --calls 0 2>/dev/null
[ $? -eq 2 ] || fail "--calls 0 accepted"
out=$(POAS_PROFILE=/nonexistent-poas-profile.json "$demo" --devices cpu -n 192 2>&1) ||
  fail "run failed: $out"
for line in 'plan for sgemm 192 x 192 x 192' 'first call: ' 'warm calls: 5, median ' \
            '0 wrong elements in all 6 calls' 'cpu0 '; do
  printf '%s' "$out" | grep -q "$line" || fail "output lacks '$line': $out"
done
out=$(POAS_PROFILE=/nonexistent-poas-profile.json "$demo" --devices cpu -n 64 --calls 1 2>&1) ||
  fail "run with one warm call failed: $out"
for line in 'warm call: ' '0 wrong elements in all 2 calls'; do
  printf '%s' "$out" | grep -q "$line" || fail "output lacks '$line': $out"
done
exit 0
