#!/bin/sh
# test-bench.sh: a short `poas-bench gemm` run on real devices only (the cpu,
# and opencl0 when there is one), checking what it writes rather than how
# fast it ran: the table, the CSV and the JSON are produced, parse, agree
# row for row, and every reported numerical error is within its bound. Also
# that usage errors exit with 2, of bench/accuracy too, that outputs that
# cannot be written fail with 1 and say why, and that each device alone
# keeps its selection entry's settings. No timing is asserted.
set -u
builddir=${top_builddir:-.}
bench=$(cd "$builddir" && pwd)/bench/poas-bench
accuracy=$(cd "$builddir" && pwd)/bench/accuracy
closed_pipe=$(cd "${top_srcdir:-.}" && pwd)/tests/closed-pipe.py
command -v python3 >/dev/null 2>&1 || { echo "skip: python3 is needed to parse the output"; exit 77; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# No profile at all: the default path, under an empty data folder. The
# tests' POAS_PROFILE names a missing file, which poas-bench refuses, as
# poas-plan and poas-demo do. (POAS_LOG unset: logging, the library would
# say what the note below says.)
unset POAS_PROFILE POAS_LOG
XDG_DATA_HOME=$tmp
export XDG_DATA_HOME

# The relations between the numbers of one run's output, recomputed from
# the others it reports (rounded to the 6 digits written): each rate is
# 2mnk / median seconds; the speedup is over the best device alone; the
# ideal is the sum of the alone rates, the efficiency the rate over it,
# and its factors multiply to it, eff_used being the alone rates of the
# devices the note says had work over the ideal; the prediction error is
# (predicted - measured) / measured; vs_cblas is over cblas's rate; the
# note flags runs spread by more than 10% of the median, and only those;
# the CSV holds the JSON's numbers, and the table shows them rounded.
# Usage: relations.py OUT.json CSV [TABLE]
cat >"$tmp/relations.py" <<'PYEOF'
import csv, json, math, re, sys

doc = json.load(open(sys.argv[1]))
rows = doc["rows"]
failures = []
def check(ok, what):
    if not ok:
        failures.append(what)
def close(a, b, rel=2e-5):
    return a is not None and b is not None and math.isclose(a, b, rel_tol=rel, abs_tol=1e-300)

groups = {}
for r in rows:
    groups.setdefault((r["m"], r["n"], r["k"], r["dtype"]), []).append(r)
for (m, n, k, dtype), group in groups.items():
    alone = {r["devices"]: r["gflops"] for r in group
             if r["role"] == "device" and r["gflops"] is not None}
    best = max(alone.values()) if alone else None
    cblas = [r["gflops"] for r in group if r["devices"] == "cblas"]
    cblas = cblas[0] if cblas else None
    for r in group:
        what = "%dx%dx%d %s %s" % (m, n, k, dtype, r["devices"])
        g, t = r["gflops"], r["measured_s"]
        if t is None:
            check(g is None, "%s: a rate %r without a time" % (what, g))
            continue
        check(close(g, 2.0 * m * n * k / t / 1e9), "%s: gflops %r, 2mnk/%r s" % (what, g, t))
        check(r["fastest_s"] <= t <= r["slowest_s"],
              "%s: median %r outside %r-%r" % (what, t, r["fastest_s"], r["slowest_s"]))
        spread = (r["slowest_s"] - r["fastest_s"]) / t
        if abs(spread - 0.10) > 1e-4:
            check((spread > 0.10) == ("x the median" in r["note"]),
                  "%s: spread %.4f, note %r" % (what, spread, r["note"]))
        if best is not None:
            check(close(r["speedup"], g / best), "%s: speedup %r, %r / %r" % (what, r["speedup"], g, best))
        if cblas is not None:
            check(close(r["vs_cblas"], g / cblas), "%s: vs_cblas %r, %r / %r" % (what, r["vs_cblas"], g, cblas))
        p, e = r["predicted_s"], r["prediction_error"]
        if p is None:
            check(e is None, "%s: an error %r without a prediction" % (what, e))
        else:
            check(abs(e * t - (p - t)) <= 1e-5 * (p + t + abs(e) * t),
                  "%s: prediction error %r, (%r - %r) / %r" % (what, e, p, t, t))
        if r["role"] != "coexec" or best is None:
            continue
        ideal = sum(alone.values())
        check(close(r["ideal_gflops"], ideal), "%s: ideal %r, sum %r" % (what, r["ideal_gflops"], ideal))
        check(close(r["efficiency"], g / ideal), "%s: efficiency %r, %r / %r" % (what, r["efficiency"], g, ideal))
        busy = re.search(r"busy vs alone: ([^;]*); fill ([0-9.]+)", r["note"])
        if r["eff_used"] is None or not busy:
            continue
        ratios = {d: float(v) for d, v in (x.rsplit(" ", 1) for x in busy.group(1).split(", "))}
        used = sum(alone[d] for d in ratios)
        check(close(r["eff_used"], used / ideal), "%s: eff_used %r, %r / %r" % (what, r["eff_used"], used, ideal))
        corun = sum(ratios[d] * alone[d] for d in ratios) / used
        check(abs(r["eff_corun"] - corun) <= 0.005 * 1.001 + 2e-5,
              "%s: eff_corun %r, the note's rates give %r" % (what, r["eff_corun"], corun))
        check(abs(r["eff_fill"] - float(busy.group(2))) <= 0.005 * 1.001,
              "%s: eff_fill %r, the note's %s" % (what, r["eff_fill"], busy.group(2)))
        check(close(r["eff_used"] * r["eff_corun"] * r["eff_fill"], r["efficiency"], 1e-4),
              "%s: factors do not multiply to the efficiency %r" % (what, r["efficiency"]))

numbers = ["measured_s", "gflops", "speedup", "efficiency", "ideal_gflops", "vs_cblas",
           "predicted_s", "report_measured_s", "prediction_error", "numerical_error",
           "error_bound", "eff_used", "eff_corun", "eff_fill", "fastest_s", "slowest_s"]
lines = list(csv.DictReader(open(sys.argv[2], newline="")))
check(len(lines) == len(rows), "CSV %d rows, JSON %d" % (len(lines), len(rows)))
for line, r in zip(lines, rows):
    for c in numbers:
        check((line[c] == "") == (r[c] is None) and (r[c] is None or float(line[c]) == r[c]),
              "%s %s: CSV %r, JSON %r" % (r["devices"], c, line[c], r[c]))

# The table's cells: the JSON's numbers as printed, within their rounding.
if len(sys.argv) > 3:
    text = [l.split() for l in open(sys.argv[3]) if re.match(r"[0-9]+x[0-9]+x[0-9]+ ", l)]
    check(len(text) == len(rows), "table %d rows, JSON %d" % (len(text), len(rows)))
    def cell(s, v, unit):
        if v is None:
            return s == "-"
        try:
            return abs(float(s) - v) <= unit * 0.5001 + 1e-9 * abs(v)
        except ValueError:
            return False
    def sig(v):
        return 10 ** (math.floor(math.log10(abs(v))) - 3) if v else 1e-300
    for l, r in zip(text, rows):
        got = dict(zip(["gflops", "speedup", "efficiency", "predicted_s", "measured_s",
                        "prediction_error"], l[3:9]))
        got["speedup"] = got["speedup"].rstrip("x")
        got["prediction_error"] = got["prediction_error"].rstrip("%")
        pe = r["prediction_error"]
        for c, v, unit in (("gflops", r["gflops"], 0.1), ("speedup", r["speedup"], 0.01),
                           ("efficiency", r["efficiency"], 0.01),
                           ("predicted_s", r["predicted_s"], sig(r["predicted_s"] or 0)),
                           ("measured_s", r["measured_s"], sig(r["measured_s"] or 0)),
                           ("prediction_error", None if pe is None else 100 * pe, 0.1)):
            check(cell(got[c], v, unit), "%s table %s %r, JSON %r" % (r["devices"], c, got[c], v))

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
PYEOF

devices=cpu
if "$builddir/tools/poas-info" --devices opencl0 >/dev/null 2>&1; then
  devices=cpu,opencl0
fi

"$bench" gemm --sizes 256 --dtype s,d --repeat 1 --devices "$devices" --csv "$tmp/x.csv" \
  --json >"$tmp/out.json" 2>"$tmp/table.txt"
rc=$?
cat "$tmp/table.txt"
[ $rc -eq 0 ] || { echo "FAIL: poas-bench gemm exited with $rc"; exit 1; }

python3 - "$tmp" <<'PYEOF' || exit 1
import csv, json, math, os, sys

tmp = sys.argv[1]
columns = ["m", "n", "k", "dtype", "devices", "role", "repeat", "measured_s", "gflops",
           "speedup", "efficiency", "ideal_gflops", "vs_cblas", "predicted_s",
           "report_measured_s", "prediction_error", "numerical_error", "error_bound",
           "eff_used", "eff_corun", "eff_fill", "fastest_s", "slowest_s", "status", "note"]
failures = []
def check(ok, what):
    if not ok:
        failures.append(what)

doc = json.load(open(tmp + "/out.json"))
for key in ("tool", "version", "command", "host", "devices", "baselines", "csv", "rows"):
    check(key in doc, "JSON lacks key %r" % key)
ids = [d["id"] for d in doc["devices"]]
check(ids and ids[0] == "cpu0", "JSON devices %r do not start with cpu0" % ids)
sets = ids + (["+".join(ids)] if len(ids) > 1 else [])
baselines = [b.split(":")[0] for b in doc["baselines"]]
check("cblas" in baselines, "the cblas baseline did not run: %r" % baselines)
expected = [(dt, s) for dt in ("s", "d") for s in sets + baselines]
rows = doc["rows"]
check([(r["dtype"], r["devices"]) for r in rows] == expected,
      "JSON rows %r, expected %r" % ([(r["dtype"], r["devices"]) for r in rows], expected))
for r in rows:
    check(sorted(r) == sorted(columns), "JSON row keys %r" % sorted(r))
    check((r["m"], r["n"], r["k"]) == (256, 256, 256), "JSON row shape %r" % r)
    check(r["status"] == "ok", "row %s %s: status %s (%s)" % (r["dtype"], r["devices"], r["status"], r["note"]))
    err, bound = r["numerical_error"], r["error_bound"]
    check(isinstance(err, (int, float)) and isinstance(bound, (int, float)) and 0 <= err <= bound,
          "row %s %s: numerical error %r, bound %r" % (r["dtype"], r["devices"], err, bound))
    check(bound < (1e-5 if r["dtype"] == "s" else 1e-13), "row %s: bound %r too loose" % (r["devices"], bound))
    check(isinstance(r["gflops"], (int, float)) and r["gflops"] > 0, "row %s: gflops %r" % (r["devices"], r["gflops"]))
    # The timed runs' range holds the median.
    check(0 < r["fastest_s"] <= r["measured_s"] <= r["slowest_s"],
          "row %s: fastest %r, median %r, slowest %r"
          % (r["devices"], r["fastest_s"], r["measured_s"], r["slowest_s"]))
    coexec = r["role"] == "coexec"
    check((r["efficiency"] is not None) == coexec, "row %s: efficiency %r" % (r["devices"], r["efficiency"]))
    # The efficiency's factors: present on the co-executed row alone, each
    # positive, and their product the efficiency.
    factors = [r["eff_used"], r["eff_corun"], r["eff_fill"]]
    check(all((f is not None) == coexec for f in factors),
          "row %s: factors %r" % (r["devices"], factors))
    if coexec and None not in factors:
        check(all(f > 0 for f in factors) and 0 < r["eff_used"] <= 1 + 1e-9,
              "row %s: factors %r" % (r["devices"], factors))
        check(math.isclose(factors[0] * factors[1] * factors[2], r["efficiency"], rel_tol=1e-4),
              "row %s: factors %r do not multiply to the efficiency %r"
              % (r["devices"], factors, r["efficiency"]))
        check("busy vs alone: cpu0 " in r["note"] and "fill" in r["note"],
              "row %s: note %r" % (r["devices"], r["note"]))

with open(tmp + "/x.csv", newline="") as f:
    table = list(csv.reader(f))
check(table and table[0] == columns, "CSV header %r" % (table[:1],))
body = table[1:]
check(len(body) == len(rows), "CSV has %d rows, JSON %d" % (len(body), len(rows)))
for line, r in zip(body, rows):
    c = dict(zip(columns, line))
    check(len(line) == len(columns), "CSV row %r" % line)
    check((c["dtype"], c["devices"], c["status"]) == (r["dtype"], r["devices"], r["status"]),
          "CSV row %r differs from JSON row %r" % (line, r))
    check(math.isclose(float(c["numerical_error"]), r["numerical_error"], rel_tol=1e-4, abs_tol=1e-30),
          "CSV numerical error %r vs JSON %r" % (c["numerical_error"], r["numerical_error"]))

text = open(tmp + "/table.txt").read().splitlines()
header = [l for l in text if l.split()[:3] == ["size", "dtype", "devices"]]
check(len(header) == 1, "table header missing")
# The host's hand-off state, before and after, where there are cores to hand off between.
if len(os.sched_getaffinity(0)) > 1:
    for when in ("before", "after"):
        probe = [l for l in text if l.startswith("poas-bench: hand-off probe %s: " % when)]
        check(len(probe) == 1 and ("hand-offs quick" in probe[0] or "hand-offs slow" in probe[0]),
              "hand-off probe %s: %r" % (when, probe))
lines = [l.split() for l in text if l.startswith("256x256x256")]
check([(l[1], l[2]) for l in lines] == expected, "table rows %r" % [(l[1], l[2]) for l in lines])

for f in failures:
    print("FAIL:", f)
print("%d rows checked, %d failures" % (len(rows), len(failures)))
sys.exit(1 if failures else 0)
PYEOF
python3 "$tmp/relations.py" "$tmp/out.json" "$tmp/x.csv" "$tmp/table.txt" || exit 1

# The co-executed row's format, which needs two devices even where only the
# cpu is real: a simulated one beside it. Only the shape of the output is
# checked; sim computes nothing, so its rows must say they were not checked.
"$bench" gemm --sizes 128 --repeat 1 --devices cpu,sim:rate=1e10 --baselines none \
  --csv "$tmp/y.csv" --json >"$tmp/sim.json" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
python3 - "$tmp/sim.json" <<'PYEOF' || exit 1
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
got = [(r["devices"], r["role"]) for r in rows]
want = [("cpu0", "device"), ("sim0", "device"), ("cpu0+sim0", "coexec")]
assert got == want, "rows %r, expected %r" % (got, want)
co = rows[2]
assert co["ideal_gflops"] is not None and co["efficiency"] is not None, co
factors = [co["eff_used"], co["eff_corun"], co["eff_fill"]]
assert None not in factors and all(f > 0 for f in factors), co
assert abs(factors[0] * factors[1] * factors[2] / co["efficiency"] - 1) < 1e-4, co
assert "busy vs alone:" in co["note"] and "fill" in co["note"], co
assert rows[0]["numerical_error"] is not None and rows[0]["numerical_error"] <= rows[0]["error_bound"], rows[0]
for r in rows[1:]:
    assert r["numerical_error"] is None and "not checked" in r["note"], r
print("co-executed row format: ok")
PYEOF
python3 "$tmp/relations.py" "$tmp/sim.json" "$tmp/y.csv" || exit 1
# An even count of runs: the median time is the mean of the middle two, and
# the shares and busy times the efficiency's factors divide must be those
# two runs' too. sim0 (jittery, virtual time) takes all the work
# co-executed and runs the very calls it runs alone, so nothing went to
# contention or idle time: corun and fill are 1. Set against the lower
# middle run's busy times alone, --repeat 4 read corun 1.20 and fill 0.83.
for r in 2 3 4; do
  "$bench" gemm --sizes 256 --repeat $r --devices sim:rate=1e11:jitter=0.3,sim:rate=5e10 \
    --baselines none --csv "$tmp/j.csv" --json >"$tmp/j.json" 2>"$tmp/j.err" ||
    { cat "$tmp/j.err"; exit 1; }
  python3 - "$tmp/j.json" <<'PYEOF' || { echo "FAIL: --repeat $r"; exit 1; }
import json, sys
rows = {r["devices"]: r for r in json.load(open(sys.argv[1]))["rows"]}
alone, co = rows["sim0"], rows["sim0+sim1"]
assert "no work for sim1" in co["note"], co
assert co["measured_s"] == alone["measured_s"], (alone, co)
assert abs(co["eff_corun"] - 1) < 1e-4 and abs(co["eff_fill"] - 1) < 1e-4, co
assert "busy vs alone: sim0 1.00; fill 1.00" in co["note"], co
PYEOF
  python3 "$tmp/relations.py" "$tmp/j.json" "$tmp/j.csv" "$tmp/j.err" || exit 1
done
echo "an even count's efficiency factors: ok"
# Without a profile the real device says it plans on the built-in
# estimate and why, in poas-plan's words; the simulated one, which has its
# own model, is not named.
grep -q "^poas-bench: note: no profile at .*: the times of cpu0 are rough built-in estimates" \
  "$tmp/err" || { echo "no note of cpu0's estimate:"; cat "$tmp/err"; exit 1; }
if grep -q "estimates.*sim0" "$tmp/err"; then
  echo "sim0 named as uncalibrated:"; cat "$tmp/err"; exit 1
fi
# A profile named by POAS_PROFILE that cannot be read is an error before
# anything runs, as for poas-plan: it once ran on built-in estimates and
# exited 0.
printf '{"format": "poas-profile", "vers' >"$tmp/corrupt.json"
POAS_PROFILE=$tmp/corrupt.json "$bench" gemm --sizes 64 --repeat 1 --devices cpu \
  --baselines none --csv "$tmp/corrupt.csv" >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc -ne 1 ] || [ -e "$tmp/corrupt.csv" ] ||
   ! grep -q "^poas-bench: the profile named by POAS_PROFILE cannot be used: .*corrupt.json" \
     "$tmp/err"; then
  echo "FAIL: a corrupt POAS_PROFILE gave $rc: $(cat "$tmp/err")"; exit 1
fi
# The error is all it says: with the baselines asked for, a note that
# cublas was left out (no GPU here) came before it.
POAS_PROFILE=$tmp/corrupt.json "$bench" gemm --sizes 64 --repeat 1 --devices cpu \
  --baselines all >/dev/null 2>"$tmp/err"
[ $? -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] ||
  { echo "FAIL: more than the corrupt profile's error: $(cat "$tmp/err")"; exit 1; }
# --profile names a profile as POAS_PROFILE does, and the message says so.
"$bench" gemm --sizes 64 --repeat 1 --devices sim --baselines none \
  --profile "$tmp/corrupt.json" --csv "$tmp/corrupt.csv" >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc -ne 1 ] || [ -e "$tmp/corrupt.csv" ] ||
   ! grep -q "^poas-bench: the profile named by --profile cannot be used: .*corrupt.json" \
     "$tmp/err"; then
  echo "FAIL: a corrupt --profile gave $rc: $(cat "$tmp/err")"; exit 1
fi
"$bench" gemm --help | grep -q -- "--profile FILE" ||
  { echo "FAIL: poas-bench gemm --help does not name --profile"; exit 1; }
echo "profile notes and a corrupt profile: ok"

# --alone-limit: a device alone predicted over the limit runs a row block,
# checked on its rows, and says so; its row keeps the whole problem's shape.
# A baseline over the limit (its first 256 rows tell) does the same.
"$bench" gemm --sizes 1024 --repeat 1 --devices cpu0 --baselines cblas --alone-limit 1e-4 \
  --csv "$tmp/z.csv" --json >"$tmp/alone.json" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
python3 - "$tmp/alone.json" <<'PYEOF' || exit 1
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert sorted(r["devices"] for r in rows) == ["cblas", "cpu0"], rows
for r in rows:
    assert (r["m"], r["n"], r["k"]) == (1024, 1024, 1024), r
    assert r["status"] == "ok" and "rows 0..255 of 1024 measured" in r["note"], r
    assert 0 <= r["numerical_error"] <= r["error_bound"], r
print("--alone-limit rows (device and baseline): ok")
PYEOF
python3 "$tmp/relations.py" "$tmp/alone.json" "$tmp/z.csv" "$tmp/err" || exit 1

# --alone-limit on a device that copies B to its own memory: B's copy costs
# the same for any row block, so the block's time is extrapolated along the
# line through it and half of it, not scaled with the rows. A simulated
# device in virtual time (exact, no noise): the extrapolated time must land
# within 5% of the whole problem's run, where scaling 768 of 2048 rows by
# 8/3 would read 1.7x too slow. (The limit picks the block by the plan of
# the calls poas-bench makes, beta = 0.)
sim=sim:rate=1e12:bandwidth=1e9
"$bench" gemm --sizes 2048 --repeat 1 --devices $sim --baselines none --csv "$tmp/w.csv" \
  --json >"$tmp/whole.json" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
"$bench" gemm --sizes 2048 --repeat 1 --devices $sim --baselines none --alone-limit 0.012 \
  --csv "$tmp/b.csv" --json >"$tmp/block.json" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
python3 - "$tmp/whole.json" "$tmp/block.json" <<'PYEOF' || exit 1
import json, sys
whole, block = (json.load(open(f))["rows"][0] for f in sys.argv[1:3])
assert "rows 0..767 and 0..383 of 2048 measured" in block["note"], block
assert "extrapolated" in block["note"], block
ratio = block["measured_s"] / whole["measured_s"]
assert abs(ratio - 1) < 0.05, (ratio, whole, block)
assert abs(block["gflops"] / whole["gflops"] - 1) < 0.05, (whole, block)
print("--alone-limit on a copying device: %.3f of the whole run: ok" % ratio)
PYEOF
python3 "$tmp/relations.py" "$tmp/block.json" "$tmp/b.csv" || exit 1
# The extrapolation recomputed: the same sim on the block's 768 rows and on
# its half's 384, as problems of their own, give the line's two points
# (virtual time: exact), and the row's times, measured and predicted, are
# that line at 2048 rows, its note's fixed part the line at 0.
for m in 768 384; do
  "$bench" gemm --shape ${m}x2048x2048 --repeat 1 --devices $sim --baselines none \
    --csv "$tmp/b$m.csv" --json >"$tmp/b$m.json" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
done
python3 - "$tmp/block.json" "$tmp/b768.json" "$tmp/b384.json" <<'PYEOF' || exit 1
import json, math, re, sys
block, at, half = (json.load(open(f))["rows"][0] for f in sys.argv[1:4])
def line(key):
    return at[key] + (at[key] - half[key]) / 384 * (2048 - 768)
for key in ("measured_s", "predicted_s", "fastest_s", "slowest_s"):
    assert math.isclose(block[key], line(key), rel_tol=2e-5), (key, block[key], line(key))
fixed = float(re.search(r"\(([0-9.e+-]+) s per run whatever the rows\)", block["note"]).group(1))
assert fixed == float("%.3g" % (2 * half["measured_s"] - at["measured_s"])), (fixed, block)
print("--alone-limit's line recomputed from its two blocks: ok")
PYEOF

# Operands larger than the host's memory are refused before anything runs,
# every such size named: malloc overcommits (3 x 16 GiB for --sizes 65536
# on a 23 GiB host), and filling them woke the OOM killer. 2^20 needs 12
# TiB. An earlier CSV is left as it was: it was emptied, then the run failed.
echo "m,n,k,an earlier run" >"$tmp/huge.csv"
"$bench" gemm --sizes 64,1048576 --dtype s,d --repeat 1 --devices sim --baselines none \
  --csv "$tmp/huge.csv" --json >"$tmp/huge.json" 2>"$tmp/err"
rc=$?
if [ $rc -ne 1 ] || [ -s "$tmp/huge.json" ] || [ "$(cat "$tmp/huge.csv")" != "m,n,k,an earlier run" ] ||
   ! grep -q "^poas-bench: 1048576x1048576x1048576 s: A, B and C need 12288.0 GiB, more than this machine's " "$tmp/err" ||
   ! grep -q "^poas-bench: 1048576x1048576x1048576 d: A, B and C need 24576.0 GiB" "$tmp/err"; then
  echo "FAIL: operands beyond the host's memory gave $rc: $(cat "$tmp/err")"; exit 1
fi
# A failed row (a device too small for the problem) measured nothing: its
# times are null in JSON and empty in the CSV, fastest_s and slowest_s too
# (they read 0).
"$bench" gemm --sizes 64 --repeat 1 --devices sim:memory=1 --baselines none \
  --csv "$tmp/small.csv" --json >"$tmp/small.json" 2>"$tmp/err"
python3 - "$tmp/small.json" "$tmp/small.csv" <<'PYEOF' || exit 1
import csv, json, sys
row = json.load(open(sys.argv[1]))["rows"][0]
times = ["measured_s", "gflops", "predicted_s", "fastest_s", "slowest_s"]
assert row["status"] == "failed" and all(row[t] is None for t in times), row
line = list(csv.DictReader(open(sys.argv[2], newline="")))[0]
assert line["status"] == "failed" and all(line[t] == "" for t in times), line
PYEOF
echo "operands beyond the host's memory refused, times left empty: ok"

# Usage errors exit with 2, say why, and leave no file behind (run where a
# stray default CSV would show).
cd "$tmp" || exit 1
mkdir usage && cd usage || exit 1
for args in "" "frobnicate" "gemm --dtype q" "gemm --sizes 0" "gemm --repeat x" \
            "gemm --shape 2x3 --sizes 4" "gemm --baselines mkl" \
            "gemm --alone-limit 0" "gemm --alone-limit x" "gemm --alone-limit +1" \
            "gemm --alone-limit 0x1" "gemm --alone-limit inf" "gemm --plot a'b.svg" \
            "gemm --plot x.png" "plot --plot x.PDF x.csv" \
            "gemm --baselines ," "gemm --baselines cblas," "gemm --sizes 64," "plot" \
            "plot --plot" "plot --foo x.csv" "plot -x x.csv" "plot --plot a'b.svg x.csv" \
            "gemm --baselines none --devices bogus"; do
  # shellcheck disable=SC2086
  "$bench" $args >/dev/null 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 2 ] || ! grep -q "poas-bench" "$tmp/err"; then
    echo "FAIL: 'poas-bench $args' exited with $rc: $(cat "$tmp/err")"
    exit 1
  fi
done
"$bench" gemm --baselines '' >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] ||
  { echo "FAIL: poas-bench gemm with an empty --baselines exited with $rc: $(cat "$tmp/err")"; exit 1; }
# An empty value names nothing: --devices '' ran on every device, --csv ''
# and --plot '' failed only once the devices were open.
for opt in csv plot profile devices; do
  "$bench" gemm --sizes 64 --repeat 1 --devices sim --baselines none --$opt '' \
    >/dev/null 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && grep -q "^poas-bench: --$opt '' names no " "$tmp/err" ||
    { echo "FAIL: poas-bench gemm --$opt '' gave $rc: $(cat "$tmp/err")"; exit 1; }
done
"$bench" plot --plot '' x.csv >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "^poas-bench plot: --plot '' names no file" "$tmp/err" ||
  { echo "FAIL: poas-bench plot --plot '' gave $rc: $(cat "$tmp/err")"; exit 1; }
# Numbers are plain digits: blanks and signs before them were taken.
for arg in "--sizes= 64" "--sizes=+64" "--sizes=64,+128" "--shape=64x 64x64" "--repeat= 1" \
           "--repeat=+1"; do
  case $arg in --repeat*) other=--sizes=64 ;; *) other=--repeat=1 ;; esac
  "$bench" gemm "$other" --devices sim --baselines none "$arg" >/dev/null 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] || { echo "FAIL: poas-bench gemm '$arg' gave $rc: $(cat "$tmp/err")"; exit 1; }
done
# Messages name the option, and the command whose --help to see.
"$bench" gemm --baselines none --devices 'sim,' >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "^poas-bench: --devices 'sim,': " "$tmp/err" ||
  { echo "FAIL: --devices 'sim,' gave $rc: $(cat "$tmp/err")"; exit 1; }
"$bench" plot --plot "a'b.svg" x.csv >/dev/null 2>"$tmp/err"
grep -q "(see poas-bench plot --help)\$" "$tmp/err" ||
  { echo "FAIL: poas-bench plot --plot \"a'b.svg\": $(cat "$tmp/err")"; exit 1; }
# The plot is SVG whatever its name: --plot x.png wrote SVG into x.png.
# Another extension is refused before any run; a name without one is taken.
"$bench" gemm --plot plots/x.png >/dev/null 2>"$tmp/err"
grep -qF "poas-bench: bad --plot (an SVG file: a name ending in .svg) 'plots/x.png' (see poas-bench gemm --help)" "$tmp/err" ||
  { echo "FAIL: poas-bench gemm --plot plots/x.png: $(cat "$tmp/err")"; exit 1; }
# A refused option names the command, not as "gemm" alone, and whose --help
# to read; the whole usage no longer follows it on stderr.
for sub in gemm plot; do
  "$bench" $sub --frobnicate x.csv >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] && [ ! -s "$tmp/out" ] && [ "$(cat "$tmp/err")" = \
    "poas-bench $sub: unrecognized option '--frobnicate'
Try 'poas-bench $sub --help' for more information." ] ||
    { echo "FAIL: poas-bench $sub --frobnicate gave $rc: $(cat "$tmp/out" "$tmp/err")"; exit 1; }
done
# Too many sizes: the message names the limit.
sizes=64 i=1
while [ $i -le 64 ]; do sizes=$sizes,64 i=$((i + 1)); done
"$bench" gemm --sizes $sizes >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -qF "bad --sizes (at most 64, each 1 to 1048576)" "$tmp/err" ||
  { echo "FAIL: 65 sizes gave $rc: $(cat "$tmp/err")"; exit 1; }
# --help states the limits the parser keeps (it once gave neither).
"$bench" --help | grep -q "at most 64, each 1 to$" && "$bench" --help | grep -q "1 to 1000 (default 5)" ||
  { echo "FAIL: poas-bench --help does not state the limits of --sizes and --repeat"; exit 1; }
# plot has a help of its own (it gave gemm's).
"$bench" plot --help | grep -q "^Usage: poas-bench plot --plot FILE.svg CSV" &&
  ! "$bench" plot --help | grep -q -- "--sizes" ||
  { echo "FAIL: poas-bench plot --help is not plot's"; exit 1; }
"$bench" gemm --repeat 1001 >/dev/null 2>&1
[ $? -eq 2 ] || { echo "FAIL: --repeat 1001 not a usage error"; exit 1; }
# A misspelt shape is named as one, not taken for a list of MxNxK.
"$bench" gemm --shape Tall --sizes 64 >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -qF "bad --shape 'Tall' (square, tall, wide or MxNxK,..., at most 64" "$tmp/err" ||
  { echo "FAIL: --shape Tall --sizes 64 gave $rc: $(cat "$tmp/err")"; exit 1; }
POAS_DEVICES=bogus "$bench" gemm --baselines none >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "^poas-bench: POAS_DEVICES 'bogus': " "$tmp/err" ||
  { echo "FAIL: POAS_DEVICES=bogus gave $rc: $(cat "$tmp/err")"; exit 1; }
# An environment the library refuses for another reason is not blamed on
# the selection: POAS_SCHED=x once read "POAS_DEVICES 'sim': invalid
# argument: unknown scheduling policy 'x'".
POAS_DEVICES=sim POAS_SCHED=x "$bench" gemm --baselines none >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && grep -q "^poas-bench: invalid argument: unknown scheduling policy 'x'" "$tmp/err" ||
  { echo "FAIL: POAS_SCHED=x gave $rc: $(cat "$tmp/err")"; exit 1; }
if [ -n "$(ls)" ]; then
  echo "FAIL: usage errors left files behind: $(ls)"
  exit 1
fi
echo "usage errors: ok"

# bench/accuracy: its usage and version, --adapt among its options, usage
# errors exit with 2 (more than one device among them), and a simulated
# device, whose calls alone take virtual time, is refused by name rather
# than measured as taking none. Its usage says which exit 1 (it said "a
# run failed" alone).
"$accuracy" --help >"$tmp/acc-help" 2>&1 && grep -q -- "--adapt" "$tmp/acc-help" &&
  grep -q "^Exit status: 0, 1 when the device is simulated or has no calibrated model,$" \
    "$tmp/acc-help" ||
  { echo "FAIL: accuracy --help: $(cat "$tmp/acc-help")"; exit 1; }
"$accuracy" --version >"$tmp/acc-help" 2>&1 && grep -q "^accuracy (POAS) " "$tmp/acc-help" ||
  { echo "FAIL: accuracy --version: $(cat "$tmp/acc-help")"; exit 1; }
for args in "--frobnicate" "--reps 0" "--reps 4 --passes 5" "extra" "--devices bogus" \
            "--timings=" "--devices cpu,sim"; do
  # shellcheck disable=SC2086
  "$accuracy" $args >/dev/null 2>"$tmp/err"
  rc=$?
  [ $rc -eq 2 ] || { echo "FAIL: 'accuracy $args' exited with $rc: $(cat "$tmp/err")"; exit 1; }
done
grep -q "selects 2 devices (cpu0, sim0); accuracy measures one" "$tmp/err" ||
  { echo "FAIL: accuracy on two devices: $(cat "$tmp/err")"; exit 1; }
"$accuracy" --devices sim --adapt >"$tmp/acc-out" 2>"$tmp/err"
rc=$?
if [ $rc -ne 1 ] || ! grep -q "sim0 is simulated" "$tmp/err" || [ -s "$tmp/acc-out" ]; then
  echo "FAIL: accuracy on a sim device gave $rc: $(cat "$tmp/err")"
  exit 1
fi
# Its device is --devices's, else cpu: POAS_DEVICES is not read, as its
# --help says (which read "as POAS_DEVICES (default cpu)").
POAS_DEVICES=sim POAS_PROFILE=$tmp/no-profile.json "$accuracy" >"$tmp/acc-out" 2>"$tmp/err"
rc=$?
if [ $rc -ne 1 ] || ! grep -q "^accuracy: cpu0 has no calibrated model" "$tmp/err"; then
  echo "FAIL: accuracy under POAS_DEVICES=sim gave $rc: $(cat "$tmp/err")"
  exit 1
fi
"$accuracy" --help | grep -q "POAS_DEVICES itself is not read" ||
  { echo "FAIL: accuracy --help does not say POAS_DEVICES is not read"; exit 1; }
echo "accuracy usage and a sim device refused: ok"
# --timings that cannot be written is refused before anything is timed (it
# failed at the end, and a failed write left the file cut short), and a
# file other than an earlier timings CSV is not replaced.
printf '{"format": "poas-profile"}\n' >"$tmp/not-timings.json"
for target in "$tmp" "$tmp/not-timings.json" "$tmp/no/such/dir/t.csv"; do
  "$accuracy" --devices cpu --timings "$target" >"$tmp/acc-out" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 1 ] || ! grep -q "^accuracy: cannot write the timings $target: " "$tmp/err" ||
    [ -s "$tmp/acc-out" ]; then
    echo "FAIL: accuracy --timings $target gave $rc: $(cat "$tmp/acc-out" "$tmp/err")"
    exit 1
  fi
done
grep -q "poas-profile" "$tmp/not-timings.json" && [ "$(ls "$tmp" | grep -c '^not-timings')" -eq 1 ] ||
  { echo "FAIL: accuracy --timings touched another file: $(ls "$tmp")"; exit 1; }
echo "accuracy --timings checked first: ok"

# poas-bench plot: the CSV written above plots again (when gnuplot is
# there; --plot=FILE was once read as a CSV's name), and a file that is not
# a poas-bench CSV, or holds no rows, is refused by name.
if "$bench" plot --plot="$tmp/again.svg" "$tmp/x.csv" 2>"$tmp/err"; then
  grep -q "<svg" "$tmp/again.svg" || { echo "FAIL: poas-bench plot wrote no SVG"; exit 1; }
  echo "plot from CSV: ok"
elif grep -q "gnuplot was not found" "$tmp/err"; then
  echo "plot from CSV: skipped (no gnuplot when configured)"
else
  echo "FAIL: poas-bench plot: $(cat "$tmp/err")"
  exit 1
fi
# A plot that cannot be drawn (rows without rates: every run failed) keeps
# an earlier plot as it was and leaves no temporary file beside it: it once
# truncated the plot to nothing. It says why in one line of its own: gnuplot,
# handed no point, wrote "x range is invalid" and the plot was said to be
# its failure.
if [ -s "$tmp/again.svg" ]; then
  cp "$tmp/again.svg" "$tmp/kept.svg"
  { head -n 1 "$tmp/x.csv"; printf '64,64,64,s,cpu0,device,1%16s,failed,""\n' | tr ' ' ,; } \
    >"$tmp/norate.csv"
  "$bench" plot --plot "$tmp/kept.svg" "$tmp/norate.csv" >/dev/null 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 1 ] || ! cmp -s "$tmp/again.svg" "$tmp/kept.svg" ||
     [ -n "$(ls "$tmp" | grep '^kept\.svg.')" ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] ||
     ! grep -qF "cannot write the plot $tmp/kept.svg: no row has a measured rate" "$tmp/err"; then
    echo "FAIL: a plot of no rates gave $rc, left $(ls "$tmp" | grep '^kept'): $(cat "$tmp/err")"
    exit 1
  fi
  echo "a failed plot keeps the earlier one: ok"
  # Plots CSV ($2) into SVG ($3), and fails the test, naming WHAT ($1),
  # unless that exits 0 with nothing on stderr (gnuplot's warnings went
  # into recorded runs) and writes an SVG.
  plots_quietly() {
    "$bench" plot --plot "$3" "$2" >/dev/null 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ] || [ -s "$tmp/err" ] || ! grep -q "<svg" "$3"; then
      echo "FAIL: $1 gave $rc: $(cat "$tmp/err")"
      exit 1
    fi
  }
  # One point (one size, one series) plots without a word on stderr: gnuplot
  # warned of an empty y range into every single-size run's record.
  plots_quietly "the plot of one point" "$tmp/w.csv" "$tmp/one.svg"
  echo "a plot of one point, quietly: ok"
  # A series without a rate (a set whose every run failed) is left out of
  # the plot beside those that have one: gnuplot warned of its empty data.
  { cat "$tmp/w.csv"; tail -n 1 "$tmp/norate.csv" | sed 's/,cpu0,/,gone0,/'; } >"$tmp/gone.csv"
  plots_quietly "the plot beside a series without rates" "$tmp/gone.csv" "$tmp/gone.svg"
  ! grep -q "gone0" "$tmp/gone.svg" ||
    { echo "FAIL: the series without rates is in the plot"; exit 1; }
  echo "a series without rates left out, quietly: ok"
  # Every point of a series is drawn, past 512 too (CSVs joined): a series
  # kept its first 512, and the one rate of 1000 after them went without a
  # word (gnuplot warned only that the rest was flat).
  { head -n 1 "$tmp/x.csv"
    awk 'BEGIN { for (i = 1; i <= 600; i++)
                   printf "%d,%d,%d,s,cpu0,device,1,0.1,%d,,,,,,,,,,,,,,,ok,\"\"\n", i, i, i,
                          i == 600 ? 1000 : 5 }'; } >"$tmp/long.csv"
  plots_quietly "the plot of a series of 600 points" "$tmp/long.csv" "$tmp/long.svg"
  grep -q "> *1000<" "$tmp/long.svg" ||
    { echo "FAIL: the 600th point of a series is not in the plot"; exit 1; }
  echo "a series of 600 points drawn whole: ok"
  # A row of any length: its notes grow with its devices, and a line past
  # 2048 bytes was read as two, the second "malformed".
  { head -n 1 "$tmp/x.csv"
    awk 'BEGIN { printf "64,64,64,s,cpu0,device,1,0.1,7,,,,,,,,,,,,,,,ok,\""
                 for (i = 0; i < 300; i++) printf "note %03d, ", i
                 printf "\"\n" }'; } >"$tmp/wide.csv"
  plots_quietly "the plot of a row of 3 KB" "$tmp/wide.csv" "$tmp/wide.svg"
  echo "a row of 3 KB read whole: ok"
fi
printf 'not,a,bench,csv\n' >"$tmp/bad.csv"
"$bench" plot --plot "$tmp/bad.svg" "$tmp/bad.csv" 2>"$tmp/err"
rc=$?
if [ $rc -ne 1 ] || ! grep -q "bad.csv" "$tmp/err"; then
  echo "FAIL: a foreign CSV gave $rc: $(cat "$tmp/err")"
  exit 1
fi
head -n 1 "$tmp/x.csv" >"$tmp/header.csv"
: >"$tmp/empty.csv"
for csv in "$tmp/header.csv" "$tmp/empty.csv" "$tmp"; do
  "$bench" plot --plot "$tmp/bad.svg" "$csv" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 1 ] || ! grep -qE "no rows to plot in $csv\$|$csv: Is a directory" "$tmp/err"; then
    echo "FAIL: poas-bench plot of $csv gave $rc: $(cat "$tmp/err")"
    exit 1
  fi
done
# A row whose m, n or k is not a whole number is malformed, not read as 0
# or as its leading digits; so is one whose time or rate is no number
# ("abc" was read as 0, "inf" left gnuplot nothing to scale) or whose role
# is none poas-bench writes (read as a device's), or whose device set is
# named past the 255 characters a row holds (cut short, and inside quotes
# the rest of it quoted, which tests/fuzz/fuzz-csv.c's round trip caught).
long=$(printf '%0300d' 0 | tr 0 a)
for row in "abc,64,64,s,cpu0,device,1,0.1,5" "64x,64,64,s,cpu0,device,1,0.1,5" \
           "64,,64,s,cpu0,device,1,0.1,5" "64,64,0,s,cpu0,device,1,0.1,5" \
           "64,64,64,s,cpu0,device,1,abc,5" "64,64,64,s,cpu0,device,1,0.1,inf" \
           "64,64,64,s,cpu0,device,1,0.1,nan" "64,64,64,s,cpu0,device,1,0.1,5x" \
           "64,64,64,s,cpu0,bogus,1,0.1,5" "64,64,64,s,$long,device,1,0.1,5" \
           "64,64,64,s,\"$long\",device,1,0.1,5"; do
  { head -n 1 "$tmp/x.csv"; printf '%s%14s,ok,""\n' "$row" | tr ' ' ,; } >"$tmp/row.csv"
  "$bench" plot --plot "$tmp/bad.svg" "$tmp/row.csv" >/dev/null 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 1 ] || ! grep -qF "$tmp/row.csv:2: malformed row" "$tmp/err"; then
    echo "FAIL: poas-bench plot of a row $row gave $rc: $(cat "$tmp/err")"
    exit 1
  fi
done
echo "plot of a foreign CSV, one without rows, or a malformed row refused: ok"

# The plot may not overwrite a CSV, the run's or one it is drawn from, by
# the same name, another name for it, or a link to it: a usage error that
# leaves the CSV as it was. (gnuplot wrote the SVG over it, and exit 0.)
# A plot named .csv is now refused for its extension first.
# A link to the run's CSV counts before that CSV exists: followed, as
# outputs are, it once wrote the SVG over the CSV the run had just made.
cp "$tmp/y.csv" "$tmp/same.csv"
ln -s same.csv "$tmp/alias.svg"
ln -s new.csv "$tmp/to-new.svg"
run="gemm --sizes 64 --repeat 1 --devices sim --baselines none"
for args in "$run --csv $tmp/same.csv --plot $tmp/./same.csv" \
            "$run --csv $tmp/new.csv --plot $tmp/../${tmp##*/}/new.csv" \
            "$run --csv $tmp/new.csv --plot $tmp/to-new.svg" \
            "$run --csv $tmp/same.csv --plot $tmp/alias.svg" \
            "plot --plot $tmp/same.csv $tmp/y.csv $tmp/same.csv" \
            "plot --plot $tmp/alias.svg $tmp/same.csv"; do
  # shellcheck disable=SC2086
  "$bench" $args >/dev/null 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 2 ] || [ -e "$tmp/new.csv" ] || ! cmp -s "$tmp/y.csv" "$tmp/same.csv" ||
     ! grep -qE "^poas-bench.*: (--plot .* is the same file as |bad --plot \(an SVG file)" "$tmp/err"; then
    echo "FAIL: 'poas-bench $args' gave $rc: $(cat "$tmp/err")"
    exit 1
  fi
done
echo "a plot over a CSV refused: ok"

# An output that cannot be written fails the run before it starts, naming
# the path and why, and leaves stdout alone: gnuplot, told to write where
# it could not, wrote the SVG to the stdout it shared with the JSON.
for plot in "$tmp/missing/x.svg" "$tmp"; do
  "$bench" gemm --sizes 64 --repeat 1 --devices sim --baselines none --csv "$tmp/p.csv" \
    --plot "$plot" --json >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 1 ] || [ -s "$tmp/out" ] || [ -e "$tmp/p.csv" ] ||
     ! grep -qF "cannot write the plot $plot: " "$tmp/err"; then
    echo "FAIL: --plot $plot gave $rc, $(wc -c <"$tmp/out") bytes on stdout: $(cat "$tmp/err")"
    exit 1
  fi
done
"$bench" gemm --sizes 64 --repeat 1 --devices sim --baselines none --csv "$tmp/missing/x.csv" \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -ne 1 ] || [ -s "$tmp/out" ] ||
   ! grep -qF "cannot write the CSV $tmp/missing/x.csv: No such file or directory" "$tmp/err"; then
  echo "FAIL: --csv in a missing folder gave $rc: $(cat "$tmp/err")"
  exit 1
fi
"$bench" plot --plot "$tmp/missing/x.svg" "$tmp/x.csv" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -ne 1 ] || [ -s "$tmp/out" ] || ! grep -qF "$tmp/missing/x.svg" "$tmp/err"; then
  echo "FAIL: poas-bench plot into a missing folder gave $rc: $(cat "$tmp/err")"
  exit 1
fi
# An output replaces only a file of its own kind, or an empty one: -p is
# --plot here but --profile in the other tools, and `poas-bench gemm -p
# profile.json` wrote an SVG over the profile. Refused before the run: a
# plot named .json for its name (above), one named otherwise for what the
# file holds.
echo '{"format": "poas-profile"}' >"$tmp/prof.json"
cp "$tmp/prof.json" "$tmp/prof"
for args in "--csv $tmp/p.csv -p $tmp/prof" "--csv $tmp/prof.json"; do
  # shellcheck disable=SC2086
  "$bench" gemm --sizes 64 --repeat 1 --devices sim --baselines none $args >"$tmp/out" \
    2>"$tmp/err"
  rc=$?
  if [ $rc -ne 1 ] || [ -s "$tmp/out" ] || [ -e "$tmp/p.csv" ] ||
     ! cmp -s "$tmp/prof" "$tmp/prof.json" ||
     [ "$(cat "$tmp/prof.json")" != '{"format": "poas-profile"}' ] ||
     ! grep -qE "cannot write the (plot|CSV) $tmp/prof(.json)?: it holds something other than (an SVG plot|a poas-bench CSV)" "$tmp/err"; then
    echo "FAIL: poas-bench gemm $args gave $rc: $(cat "$tmp/err"); $(head -c 60 "$tmp/prof")"
    exit 1
  fi
done
"$bench" plot --plot "$tmp/prof" "$tmp/x.csv" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && [ "$(cat "$tmp/prof")" = '{"format": "poas-profile"}' ] ||
  { echo "FAIL: poas-bench plot --plot over a profile gave $rc: $(cat "$tmp/err")"; exit 1; }
rm -f "$tmp/prof.json" "$tmp/prof"
echo "outputs that cannot be written: ok"

# An output goes to the regular file its path names, through symbolic
# links, and the run is refused before it starts where the path names
# something else: renamed over it, the output replaced a FIFO or a device
# with a regular file (as root, --plot /dev/null took /dev/null away), and
# a link with itself, leaving the file it named as it was. (fd 3 holds the
# FIFO open, so that opening it to write does not wait for a reader.)
mkfifo "$tmp/fifo" || exit 1
exec 3<>"$tmp/fifo"
run="gemm --sizes 64 --repeat 1 --devices sim --baselines none"
for out in "--csv /dev/null" "--csv $tmp/fifo" "--csv $tmp/q.csv --plot $tmp/fifo"; do
  # shellcheck disable=SC2086
  "$bench" $run $out >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 1 ] || [ -s "$tmp/out" ] || [ ! -p "$tmp/fifo" ] || [ -e "$tmp/q.csv" ] ||
     ! grep -qE "cannot write the (CSV|plot) [^ ]*: (it is a (character device|FIFO), not a regular file|gnuplot was not found)" "$tmp/err"; then
    echo "FAIL: poas-bench $out gave $rc: $(cat "$tmp/err")"
    exit 1
  fi
done
"$bench" plot --plot "$tmp/fifo" "$tmp/x.csv" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc -eq 1 ] && [ -p "$tmp/fifo" ] ||
  { echo "FAIL: poas-bench plot --plot FIFO gave $rc: $(cat "$tmp/err")"; exit 1; }
exec 3>&-
# /dev/stdout on a pipe is a FIFO too, and said so: its /proc link's text
# ("pipe:[N]") names no file, and following it once ended in "No such file
# or directory".
# shellcheck disable=SC2086
{ "$bench" $run --csv /dev/stdout 2>"$tmp/err"; echo $? >"$tmp/rc"; } | cat >/dev/null
rc=$(cat "$tmp/rc")
if [ "$rc" -ne 1 ] ||
   ! grep -qF "cannot write the CSV /dev/stdout: it leads to a FIFO, not a regular file" "$tmp/err"; then
  echo "FAIL: --csv /dev/stdout on a pipe gave $rc: $(cat "$tmp/err")"
  exit 1
fi
# Through a link the file it names is replaced, keeping its permissions.
echo "m,n,k,old" >"$tmp/real.csv" # an earlier CSV, as only one is replaced
chmod 640 "$tmp/real.csv"
ln -s real.csv "$tmp/link.csv"
# shellcheck disable=SC2086
"$bench" $run --csv "$tmp/link.csv" >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
if [ ! -L "$tmp/link.csv" ] || ! head -n 1 "$tmp/real.csv" | grep -q "^m,n,k," ||
   [ -z "$(find "$tmp/real.csv" -perm 640)" ]; then
  echo "FAIL: --csv through a link: $(ls -l "$tmp/link.csv" "$tmp/real.csv")"
  exit 1
fi
if [ -s "$tmp/again.svg" ]; then
  echo "<svg>old</svg>" >"$tmp/real.svg" # an earlier plot, as only one is replaced
  ln -s real.svg "$tmp/link.svg"
  "$bench" plot --plot "$tmp/link.svg" "$tmp/x.csv" >/dev/null 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 0 ] || [ ! -L "$tmp/link.svg" ] || ! grep -q "<svg" "$tmp/real.svg"; then
    echo "FAIL: --plot through a link gave $rc: $(cat "$tmp/err")"
    exit 1
  fi
fi
# A CSV whose writing fails midway (a limit on file sizes stands in for a
# full disk) leaves the earlier file as it was: it was emptied before the
# run, then held what had been written. (4 blocks are 2 or 4 KiB, by the
# shell: the CSV of 64 sizes takes about 9, stderr well under 2.)
cp "$tmp/y.csv" "$tmp/kept.csv"
if (ulimit -f 4) 2>/dev/null; then
  sizes=16 i=1
  while [ $i -lt 64 ]; do sizes=$sizes,16 i=$((i + 1)); done
  (trap '' XFSZ; ulimit -f 4 && exec "$bench" gemm --sizes $sizes --repeat 1 --devices sim \
    --baselines none --csv "$tmp/kept.csv" >/dev/null 2>"$tmp/err")
  rc=$?
  if [ $rc -ne 1 ] || ! cmp -s "$tmp/y.csv" "$tmp/kept.csv" ||
     ! grep -qF "cannot write the CSV $tmp/kept.csv: File too large" "$tmp/err"; then
    echo "FAIL: a CSV cut short gave $rc: $(cat "$tmp/err")"
    exit 1
  fi
fi
for f in "$tmp"/*.tmp; do
  if [ -e "$f" ]; then echo "FAIL: a new file left behind: $f"; exit 1; fi
done
echo "outputs through links, not over FIFOs or devices, whole or not at all: ok"

# Each device alone keeps its entry's settings, blanks around the entry or
# its ':' or not, from --devices or POAS_DEVICES alike: sim1 at 1e9 flop/s
# runs, alone, at most 1 GFLOP/s (virtual time), not at the default 100.
# The library reads "sim :rate=1e9" as "sim:rate=1e9" (core/spec.c); the
# bench once took "sim " for a kind no device has, and ran sim1 alone
# without its settings.
for how in devices env blanks; do
  sel=" sim:rate=1e12, sim:rate=1e9 "
  [ $how = blanks ] && sel="sim : rate = 1e12 ,sim	:rate=1e9"
  if [ $how = devices ]; then
    "$bench" gemm --sizes 128 --repeat 1 --baselines none --devices "$sel" --csv "$tmp/s.csv" \
      --json >"$tmp/sel.json" 2>"$tmp/err"
  else
    POAS_DEVICES=$sel "$bench" gemm --sizes 128 --repeat 1 --baselines none --csv "$tmp/s.csv" \
      --json >"$tmp/sel.json" 2>"$tmp/err"
  fi || { cat "$tmp/err"; exit 1; }
  python3 - "$tmp/sel.json" <<'PYEOF' || { echo "FAIL: the selection by $how"; exit 1; }
import json, sys
rows = {r["devices"]: r for r in json.load(open(sys.argv[1]))["rows"]}
assert 0.5 < rows["sim1"]["gflops"] <= 1.0001, rows["sim1"]
assert rows["sim0"]["gflops"] > 10, rows["sim0"]
PYEOF
done
echo "each device alone keeps its settings, blanks or not: ok"

# Output lost to a full disk fails the run and says why, once: the table
# and the JSON on stdout (the table's own flush took the error, and
# "Input/output error" was said), and accuracy's stdout (its full run
# needs a calibrated profile, so its --help stands in).
if [ -w /dev/full ]; then
  for out in table json; do
    if [ $out = table ]; then
      "$bench" gemm --sizes 64 --repeat 1 --devices sim --baselines none --csv "$tmp/f.csv" \
        >/dev/full 2>"$tmp/err"
    else
      "$bench" gemm --sizes 64 --repeat 1 --devices sim --baselines none --csv "$tmp/f.csv" \
        --json >/dev/full 2>"$tmp/err"
    fi
    rc=$?
    if [ $rc -ne 1 ] || [ "$(grep -c "cannot write" "$tmp/err")" -ne 1 ] ||
       ! grep -q "^poas-bench: cannot write the output: No space left on device$" "$tmp/err"; then
      echo "FAIL: the $out on a full disk gave $rc: $(cat "$tmp/err")"
      exit 1
    fi
  done
  "$accuracy" --help >/dev/full 2>"$tmp/err"
  rc=$?
  [ $rc -eq 1 ] && grep -q "^accuracy: cannot write" "$tmp/err" ||
    { echo "FAIL: accuracy --help on a full disk gave $rc: $(cat "$tmp/err")"; exit 1; }
  echo "output on a full disk: ok"
fi

# A closed stdout is an error said on stderr, and the CSV holds the CSV
# alone: the CSV's new file took descriptor 1, and the table went into it,
# exit 0. A reader that goes away is one too (SIGPIPE ended the run
# without a word, exit 141, leaving the CSV's new file behind).
"$bench" gemm --sizes 64 --repeat 1 --devices sim --baselines none --csv "$tmp/c.csv" \
  >&- 2>"$tmp/err"
rc=$?
if [ $rc -ne 1 ] || ! grep -q "^poas-bench: cannot write the output: Bad file descriptor$" "$tmp/err" ||
   grep -q "GFLOP/s" "$tmp/c.csv"; then
  echo "FAIL: a closed stdout gave $rc: $(cat "$tmp/err"); the CSV: $(cat "$tmp/c.csv")"
  exit 1
fi
rc=$(python3 "$closed_pipe" "$tmp/err" "$bench" gemm --sizes 64 --repeat 1 --devices sim \
  --baselines none --csv "$tmp/p.csv")
if [ "$rc" -ne 1 ] || ! grep -q "^poas-bench: cannot write the output: Broken pipe$" "$tmp/err" ||
   [ "$(find "$tmp" -name 'p.csv.*.tmp' | wc -l)" -ne 0 ]; then
  echo "FAIL: a reader gone gave $rc: $(cat "$tmp/err"); $(ls "$tmp")"
  exit 1
fi
echo "a closed stdout and a reader gone: ok"

# A run stopped by a signal keeps the rows of the sizes it finished in
# CSV.partial, and leaves the CSV it was to replace as it was (a long run
# stopped by hand lost them all); stopped before any size finished, it
# leaves nothing. SIGTERM: a shell's background job ignores SIGINT.
new_rows() { # the lines of the run's new CSV file, once there is one
  for f in "$tmp"/s.csv.*.tmp; do [ -f "$f" ] && wc -l <"$f" && return; done
  echo 0
}
stop_after_lines() { # runs poas-bench on $2..., stops it once its new CSV holds $1 lines
  local want=$1 i
  shift
  echo m,n,k,earlier >"$tmp/s.csv"
  rm -f "$tmp/s.csv.partial"
  "$bench" gemm --devices cpu --repeat 4 --baselines none --csv "$tmp/s.csv" "$@" \
    >/dev/null 2>"$tmp/err" &
  local pid=$!
  for i in $(seq 1200); do
    [ "$(new_rows)" -ge "$want" ] && break
    sleep 0.05
  done
  kill -TERM $pid
  wait $pid
}
stop_after_lines 2 --sizes 64,2048,2048
rc=$?
if [ $rc -ne 143 ] || [ "$(cat "$tmp/s.csv")" != m,n,k,earlier ] ||
   [ "$(sed -n 2p "$tmp/s.csv.partial" | cut -d, -f1-5)" != "64,64,64,s,cpu0" ] ||
   [ "$(wc -l <"$tmp/s.csv.partial")" -ne 2 ] || ls "$tmp"/s.csv.*.tmp >/dev/null 2>&1 ||
   ! grep -q "stopped: the 1 row finished is kept in .*s.csv.partial" "$tmp/err"; then
  echo "FAIL: stopped after a size: exit $rc; $(cat "$tmp/err"); $(ls "$tmp");" \
    "$(cat "$tmp/s.csv.partial" 2>&1)"
  exit 1
fi
stop_after_lines 1 --sizes 2048,64
rc=$?
if [ $rc -ne 143 ] || [ "$(cat "$tmp/s.csv")" != m,n,k,earlier ] || [ -e "$tmp/s.csv.partial" ] ||
   ls "$tmp"/s.csv.*.tmp >/dev/null 2>&1; then
  echo "FAIL: stopped before a size: exit $rc; $(cat "$tmp/err"); $(ls "$tmp")"
  exit 1
fi
rm -f "$tmp/s.csv"
echo "a stopped run keeps the sizes it finished: ok"

# A CSV's name may be as long as a folder takes: its new file's name is cut
# short to fit (with 244 characters or more it was "File name too long").
long=$(printf '%0250d.csv' 0)
"$bench" gemm --sizes 64 --repeat 1 --devices sim --baselines none --csv "$tmp/$long" \
  >/dev/null 2>"$tmp/err" && head -n 1 "$tmp/$long" | grep -q "^m,n,k," ||
  { echo "FAIL: a CSV named with 254 characters: $(cat "$tmp/err")"; exit 1; }
rm -f "$tmp/$long"

# Every device alone failing leaves no ideal rate: the co-executed row's
# efficiency has no value, and the JSON says null (it held "inf", which no
# JSON reader takes).
POAS_FAULT=sim0:after=1 "$bench" gemm --devices sim,sim --sizes 8 --repeat 1 --baselines none \
  --csv "$tmp/e.csv" --json >"$tmp/e.json" 2>"$tmp/err"
python3 - "$tmp/e.json" <<'PYEOF' || { echo "FAIL: $(cat "$tmp/e.json" "$tmp/err")"; exit 1; }
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
co = [r for r in rows if r["role"] == "coexec"]
assert co and all(r["efficiency"] is None for r in co), co
PYEOF
echo "no ideal, no efficiency: ok"
# A device that failed alone has no rate in the ideal: the co-executed row
# says its efficiency is overstated (it said nothing).
POAS_FAULT=sim0:after=0 "$bench" gemm --devices cpu:threads=1,sim --sizes 8 --repeat 1 \
  --baselines none --csv "$tmp/p.csv" --json >"$tmp/p.json" 2>"$tmp/err"
python3 - "$tmp/p.json" <<'PYEOF' || { echo "FAIL: $(cat "$tmp/p.json" "$tmp/err")"; exit 1; }
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
co = [r for r in rows if r["role"] == "coexec"]
assert co and all("the ideal leaves out sim0, which had no rate alone" in r["note"] for r in co), co
PYEOF
echo "an ideal without a device that failed alone says so: ok"
# The host's hand-off state is probed where something real runs: not for
# sims alone without a baseline, whose times it does not touch.
"$bench" gemm --devices sim --sizes 8 --repeat 1 --baselines none --csv "$tmp/h.csv" \
  >/dev/null 2>"$tmp/err" && ! grep -q "hand-off probe" "$tmp/err" ||
  { echo "FAIL: sims alone probed the host: $(cat "$tmp/err")"; exit 1; }
echo "no hand-off probe for sims alone: ok"
