#!/usr/bin/env bash
# Where a serving machine's host time goes: `polyvox serve` and a `polyvox bench --url`
# closed loop at CONCURRENCY, both sampled by py-spy (collapsed stacks, every thread, and
# with --gil the thread holding the GIL), then the same load from two client processes
# (a client-bound run makes more audio with two) and the in-process benchmark at the
# same concurrency (what HTTP costs). Needs py-spy (pip install py-spy).
#
#   scripts/profile_server.sh OUT_DIR CONCURRENCY REQUESTS [serve options...]
#
# OUT_DIR gets server.txt, server-gil.txt and client.txt (py-spy --format raw: one
# "stack count" line each, for flamegraph tools or scripts/stacks.py), the bench JSONs and
# the logs. PORT (default 8793) and PYTHON as scripts/overload_runs.sh.
set -uo pipefail
OUT=$(realpath -m "${1:?usage: OUT_DIR CONCURRENCY REQUESTS [serve options]}")
C=${2:?concurrency}
N=${3:?requests per client}
shift 3
cd "$(dirname "$0")/.."
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
SPY=${PY_SPY:-py-spy}
PORT=${PORT:-8793}
URL=http://127.0.0.1:$PORT
mkdir -p "$OUT"
ulimit -n 65536 2>/dev/null || true
SERVE=($PY -m polyvox.cli serve --port "$PORT" --data-dir "$OUT/data" --log-level warning
       --calibrate-seconds 0 --max-streams "$C" "$@")

ready() { $PY -c "import urllib.request as u; u.urlopen('$URL/ready', timeout=5)" 2>/dev/null; }
wait_ready() {
  local started=$SECONDS
  until ready; do
    kill -0 "$1" 2>/dev/null || { echo "the server exited"; tail -20 "$OUT/server.log"; return 1; }
    ((SECONDS - started > 300)) && { echo "not ready in time"; return 1; }
    sleep 1
  done
}
bench() {  # bench NAME CONCURRENCY [py-spy options]: one closed-loop client process
  local name=$1 c=$2
  shift 2
  local cmd=($PY -m polyvox.cli bench --url "$URL" --concurrency "$c" --requests "$N"
             --json "$OUT/$name.json")
  if (($#)); then cmd=($SPY record --nonblocking --format raw --rate 200 "$@" -- "${cmd[@]}"); fi
  "${cmd[@]}" >"$OUT/$name.log" 2>&1
  row "$OUT/$name.json"
}
row() {  # the first row of a bench JSON, in one line
  $PY -c "import json,sys; r=json.load(open(sys.argv[1]))['rows'][0]; print(sys.argv[1].split('/')[-1],
' '.join(f'{k}={r[k]}' for k in ('concurrency','requests','errors','ttfa_p50_ms','ttfa_p90_ms',
'audio_throughput','request_throughput','underruns','viability')))" "$1" 2>/dev/null || tail -5 "${1%.json}.log"
}
stop() { kill -INT "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# 1. every thread of the server, and the client, under one load
$SPY record --nonblocking --format raw --rate 200 --threads -o "$OUT/server.txt" -- \
  "${SERVE[@]}" >"$OUT/server.log" 2>&1 &
SERVER=$!
wait_ready $SERVER || exit 1
echo "== one client process, c=$C (profiled)"
bench one $C -o "$OUT/client.txt"
echo "== two client processes, c=$((C / 2)) each"
bench two-a $((C / 2)) & A=$!
bench two-b $((C - C / 2)) & B=$!
wait $A $B
# the py-spy parent passes SIGINT on to the server and writes its file
pkill -INT -f "polyvox.cli serve --port $PORT"; wait $SERVER

# 2. which thread holds the GIL, under the same load
$SPY record --nonblocking --format raw --rate 200 --threads --gil -o "$OUT/server-gil.txt" -- \
  "${SERVE[@]}" >"$OUT/server-gil.log" 2>&1 &
SERVER=$!
wait_ready $SERVER || exit 1
echo "== one client process, c=$C (server GIL profiled)"
bench one-gil $C
pkill -INT -f "polyvox.cli serve --port $PORT"; wait $SERVER

# 3. the engine in process, same concurrency, no HTTP
echo "== in process, c=$C"
$PY -m polyvox.cli bench --modes batched --concurrency "$C" --requests "$N" \
  --json "$OUT/inprocess.json" "$@" >"$OUT/inprocess.log" 2>&1
row "$OUT/inprocess.json"
echo "== profile done in ${SECONDS}s"
