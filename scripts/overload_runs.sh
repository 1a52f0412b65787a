#!/usr/bin/env bash
# The overload protocol of docs/perf.md (F): start `polyvox serve` on a fresh data dir (a
# first start calibrates its load model), read the limit it learned from /ready as the
# capacity, run one learning round at 3x, then ROUNDS rounds of `polyvox bench --url
# --overload` at each factor in FACTORS (every run starts all its callers at once: a step
# from idle to FACTOR x capacity), and print the medians over rounds. Results (one JSON per
# run, the server's log, its final /metrics, summary.json) go under OUT_DIR.
#
#   scripts/overload_runs.sh OUT_DIR ROUNDS FACTORS SECONDS [serve options...]
#   e.g. scripts/overload_runs.sh /tmp/ov 3 1,3,10 20 --model piper/joe
#
# OVERLOAD_STREAMS=N uses N as the capacity instead of the learned limit; PORT (default
# 8791) is the server's port; PYTHON the interpreter (default: .venv's, else python3).
# BENCH_NICE=N runs the benchmark client at that niceness (negative: ahead of the server,
# as a client on its own machine would be; needs the privilege).
# OPEN_RATES="3,9,28" adds open-loop rounds at those arrival rates (requests a second) for
# each burstiness in BURSTINESS (default "1,4": Poisson, and gamma gaps of shape 1/4).
set -uo pipefail
OUT=$(realpath -m "${1:?usage: OUT_DIR ROUNDS FACTORS SECONDS [serve options]}")
ROUNDS=${2:?rounds}
FACTORS=${3?factors, e.g. 1,3,10 (empty: open loop only)}
SECONDS_PER_RUN=${4:?seconds per run}
shift 4
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
PORT=${PORT:-8791}
URL=http://127.0.0.1:$PORT
mkdir -p "$OUT"
rm -rf "$OUT/data"
ulimit -n 65536 2>/dev/null || true  # thousands of callers at 10x

$PY -m polyvox.cli serve --port "$PORT" --data-dir "$OUT/data" --log-level warning "$@" \
  >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT

ready() { $PY -c "import json,sys,urllib.request as u; print(json.dumps(json.load(
u.urlopen('$URL/ready', timeout=5))))" 2>/dev/null; }
started=$SECONDS
until ready >/dev/null; do
  if ! kill -0 $SERVER 2>/dev/null; then
    echo "the server exited:"; tail -20 "$OUT/server.log"; exit 1
  fi
  if ((SECONDS - started > ${READY_TIMEOUT:-600})); then
    echo "the server was not ready in time"; tail -20 "$OUT/server.log"; exit 1
  fi
  sleep 1
done
echo "== ready after $((SECONDS - started)) s: $(ready)"
LIMIT=$(ready | $PY -c "import json,sys; print(json.load(sys.stdin)['limit'])")
CAPACITY=${OVERLOAD_STREAMS:-$LIMIT}
echo "== capacity: $CAPACITY streams (learned limit $LIMIT)"

bench() {  # bench NAME FACTOR
  echo "== $1: factor $2, limit now $(ready | $PY -c "import json,sys; print(json.load(sys.stdin)['limit'])")"
  nice -n "${BENCH_NICE:-0}" $PY -m polyvox.cli bench --url "$URL" --overload \
    --overload-streams "$CAPACITY" \
    --overload-factor "$2" --overload-seconds "$SECONDS_PER_RUN" --concurrency 1 \
    --requests 4 --json "$OUT/$1.json" 2>&1 | grep -E "overload|accepted streams" || true
}
bench learn 3
for round in $(seq 1 "$ROUNDS"); do
  for factor in ${FACTORS//,/ }; do
    bench "run-${factor}x-$round" "$factor"
  done
done
open_loop() {  # open_loop NAME RATE BURSTINESS
  echo "== $1: $2 requests/s, burstiness $3"
  $PY -m polyvox.cli bench --url "$URL" --concurrency 1 --requests 4 --rate "$2" \
    --duration "$SECONDS_PER_RUN" --burstiness "$3" --json "$OUT/$1.json" >/dev/null 2>&1 \
    || echo "   failed"
}
if [ -n "${OPEN_RATES:-}" ]; then
  for round in $(seq 1 "$ROUNDS"); do
    for rate in ${OPEN_RATES//,/ }; do
      for burstiness in $(echo "${BURSTINESS:-1,4}" | tr , ' '); do
        open_loop "open-${rate}-${burstiness}-$round" "$rate" "$burstiness"
      done
    done
  done
fi
echo "== final: $(ready)"
$PY -c "import urllib.request as u; print(u.urlopen('$URL/metrics', timeout=5).read().decode())" \
  >"$OUT/metrics.txt" 2>/dev/null || true  # the server's own counts (queue waits, TTFA)

$PY - "$OUT" "$CAPACITY" <<'EOF' | tee "$OUT/summary.txt"
import glob, json, os, statistics, sys
out, capacity = sys.argv[1], int(sys.argv[2])
by_factor = {}
for path in sorted(glob.glob(os.path.join(out, "run-*.json"))):
    report = json.load(open(path))
    over, idle = report["overload"], report["rows"][0]
    by_factor.setdefault(over["factor"], []).append(over | {
        "idle_ttfa_p90_ms": idle["ttfa_p90_ms"],
        "idle_server_ttfa_p90_ms": idle.get("server_ttfa_p90_ms")})
summary = {"capacity": capacity, "factors": {}}
keys = ("underruns", "viability", "ttfa_p90_ms", "idle_ttfa_p90_ms", "server_ttfa_p90_ms",
        "idle_server_ttfa_p90_ms", "goodput",
        "audio_throughput", "refusal_p99_ms", "accepted", "rejected", "errors")
for factor, runs in sorted(by_factor.items()):
    row = {}
    for key in keys:
        values = [run[key] for run in runs if run.get(key) is not None]
        row[key] = {"median": statistics.median(values) if values else None,
                    "min": min(values, default=None), "max": max(values, default=None)}
    summary["factors"][str(factor)] = row
    print(f"{factor:g}x ({len(runs)} runs): " + ", ".join(
        f"{key} {row[key]['median']:.3g} [{row[key]['min']:.3g}-{row[key]['max']:.3g}]"
        for key in keys if row[key]["median"] is not None))
summary["open"] = {}
by_load = {}
for path in sorted(glob.glob(os.path.join(out, "open-*.json"))):
    _, rate, burstiness, _ = os.path.basename(path)[:-5].split("-")
    report = json.load(open(path))
    by_load.setdefault((float(rate), float(burstiness)), []).append(report["rows"][-1])
open_keys = ("underruns", "viability", "ttfa_p90_ms", "server_ttfa_p90_ms", "goodput",
             "request_throughput",
             "rejected", "refusal_p99_ms", "requests", "errors")
for (rate, burstiness), rows in sorted(by_load.items()):
    row = {}
    for key in open_keys:
        values = [r[key] for r in rows if r.get(key) is not None]
        row[key] = {"median": statistics.median(values) if values else None,
                    "min": min(values, default=None), "max": max(values, default=None)}
    summary["open"][f"{rate:g}/s, burstiness {burstiness:g}"] = row
    print(f"open {rate:g}/s burstiness {burstiness:g} ({len(rows)} runs): " + ", ".join(
        f"{key} {row[key]['median']:.3g} [{row[key]['min']:.3g}-{row[key]['max']:.3g}]"
        for key in open_keys if row[key]["median"] is not None))
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
EOF
