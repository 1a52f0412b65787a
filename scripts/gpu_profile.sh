#!/usr/bin/env bash
# Where the GPU machine's host time goes when it serves over HTTP: scripts/profile_server.sh
# for `pocket/english` bf16 with CUDA graphs at CONCURRENCY (default 32), on a bare GPU
# machine (scripts/gpu_prelude.sh). OUT_DIR gets the log and profile.tar.gz (stacks,
# bench JSONs, logs). About 3 minutes.
#
#   scripts/gpu_profile.sh OUT_DIR [CONCURRENCY] [REQUESTS]
set -uo pipefail
OUT=$(realpath -m "${1:?usage: scripts/gpu_profile.sh OUT_DIR [CONCURRENCY] [REQUESTS]}")
C=${2:-32}
N=${3:-20}
source "$(dirname "$0")/gpu_prelude.sh"
RUNS=/tmp/polyvox-profile
export PY_SPY=$($PYTHON -c "import os, sys; print(os.path.join(os.path.dirname(sys.executable), 'py-spy'))")
[ -x "$PY_SPY" ] || PY_SPY=py-spy
timeout --signal=INT 300 scripts/profile_server.sh "$RUNS" "$C" "$N" \
  --model pocket/english --device cuda --precision bfloat16 --graphs cuda --overlap on \
  --max-running 256 --kv-memory-mb 16384 --threads 4
echo "== profile: exit $?"
tar czf "$OUT/profile.tar.gz" -C "$RUNS" --exclude=data . 2>/dev/null
echo "== done in ${SECONDS}s"
