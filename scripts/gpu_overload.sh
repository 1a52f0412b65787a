#!/usr/bin/env bash
# The GPU admission check, in one go (issue #26's `pocket/english` bf16 rows, which the
# 2-core box cannot measure: its benchmark client starves the engine): the CUDA tests,
# then scripts/overload_runs.sh against `polyvox serve --model pocket/english --device
# cuda --precision bfloat16` with CUDA graphs, client and server on the GPU machine's 16
# cores. Made for a bare machine with PyTorch and CUDA (no network): the other packages
# come from .gpu-wheels/ (scripts/gpu_wheels.sh; carry it). Random weights run with
# --no-eos (every request to its length cap, as the in-process benchmark): their random
# end of speech stops most requests within a second, and the run would measure request
# setup at 100+ requests a second instead of streaming. About 6 minutes.
#
#   scripts/gpu_overload.sh OUT_DIR [ROUNDS] [SECONDS]
#
# OUT_DIR gets the log, summary.txt and overload.tar.gz (every run's JSON, the server's log).
set -uo pipefail
OUT=$(realpath -m "${1:?usage: scripts/gpu_overload.sh OUT_DIR [ROUNDS] [SECONDS]}")
ROUNDS=${2:-3}
RUN_SECONDS=${3:-12}
source "$(dirname "$0")/gpu_prelude.sh"

echo "== cuda tests"
timeout --signal=ABRT 100 $PYTHON -m pytest tests/gpu -q -p no:cacheprovider -rs -x
echo "== cuda tests: exit $?"

echo "== overload, pocket/english bf16, $ROUNDS rounds of ${RUN_SECONDS}s at 1x, 3x, 10x"
RUNS=/tmp/polyvox-overload
timeout --signal=INT 330 scripts/overload_runs.sh "$RUNS" "$ROUNDS" 1,3,10 "$RUN_SECONDS" \
  --model pocket/english --device cuda --precision bfloat16 --graphs cuda --overlap on \
  --max-running 128 --kv-memory-mb 16384 --threads 4 --no-eos
echo "== overload: exit $?"
cp "$RUNS/summary.txt" "$OUT/" 2>/dev/null
tar czf "$OUT/overload.tar.gz" -C "$RUNS" --exclude=voices . 2>/dev/null
echo "== done in ${SECONDS}s"
