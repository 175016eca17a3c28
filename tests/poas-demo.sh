#!/bin/sh
# poas-demo.sh: the README's demo: help, a bad size refused, and a small run
# on the CPU that prints its plan and both calls, each checked exactly.
set -u
demo="${top_builddir:-.}/tools/poas-demo"
fail() { echo "poas-demo.sh: $*" >&2; exit 1; }

"$demo" --help | grep -q "Usage: poas-demo" || fail "--help"
"$demo" --n 0 2>/dev/null
[ $? -eq 2 ] || fail "--n 0 accepted"
out=$(POAS_PROFILE=/nonexistent-poas-profile.json "$demo" --devices cpu -n 192 2>&1) ||
  fail "run failed: $out"
for line in 'plan for sgemm 192 x 192 x 192' 'first call: ' 'second call: ' \
            '0 wrong elements in both' 'cpu0 '; do
  printf '%s' "$out" | grep -q "$line" || fail "output lacks '$line': $out"
done
exit 0
