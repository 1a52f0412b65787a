#!/usr/bin/env bash
# The GPU check, in one go: the CUDA tests, then `polyvox bench` on pocket/english
# (batched; c = 1, 16, 64, 128, 256; CUDA graphs + overlapped loop on, then both off; and
# bfloat16) and on piper/joe, writing JSON and a log under OUT_DIR. Made for a bare machine
# with one GPU (PyTorch with CUDA preinstalled, no network): the other packages come from
# .gpu-wheels/ (scripts/gpu_wheels.sh fills it; carry it with the tree). About 8 minutes.
#
#   scripts/gpu_check.sh OUT_DIR
#
# Every step has a time limit; a step that fails or runs out is logged and the next one
# runs. Results go in docs/perf.md by hand (date, card, command).
set -uo pipefail
OUT=$(realpath -m "${1:?usage: scripts/gpu_check.sh OUT_DIR}")
BUDGET=${GPU_CHECK_SECONDS:-470}  # all steps together
export PYTHONFAULTHANDLER=1
source "$(dirname "$0")/gpu_prelude.sh"
PY=$PYTHON
$PY - <<'EOF' | tee "$OUT/env.json"
import json, platform, torch
print(json.dumps({
    "python": platform.python_version(), "torch": torch.__version__,
    "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0)
    if torch.cuda.is_available() else None}))
EOF

# run NAME SECONDS COMMAND...: one step, limited to SECONDS and to what is left of BUDGET.
run() {
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - SECONDS))
  ((limit > left)) && limit=$left
  if ((limit < 15)); then
    echo "== $name: skipped (no time left)"
    return
  fi
  echo "== $name (limit ${limit}s): $*"
  local start=$SECONDS
  # SIGABRT first: with PYTHONFAULTHANDLER set, a step that hangs prints every thread's stack.
  timeout --signal=ABRT --kill-after=10 "$limit" "$@"
  echo "== $name: exit $? after $((SECONDS - start))s"
}

run cuda-tests 120 $PY -m pytest tests/gpu -q -p no:cacheprovider -rs \
  --junitxml "$OUT/cuda_tests.xml"

BENCH=($PY -m polyvox.cli bench --device cuda --modes batched --requests 1 --threads 4
       --max-running 256 --kv-memory-mb 16384)
run pocket-graphs-on 100 "${BENCH[@]}" --model pocket/english --concurrency 1,16,64,256 \
  --graphs cuda --overlap on --json "$OUT/pocket_graphs_on.json"
run pocket-graphs-off 70 "${BENCH[@]}" --model pocket/english --concurrency 1,16,64,256 \
  --graphs off --overlap off --json "$OUT/pocket_graphs_off.json"
run pocket-bf16 50 "${BENCH[@]}" --model pocket/english --concurrency 64,256 \
  --precision bfloat16 --graphs cuda --overlap on --json "$OUT/pocket_bf16.json"
run pocket-capacity 150 "${BENCH[@]}" --model pocket/english --concurrency 1,64,128,256 \
  --graphs cuda --overlap on --capacity --json "$OUT/pocket_capacity.json"
if $PY -c "import piper, onnxruntime" 2>/dev/null; then
  run piper 60 "${BENCH[@]}" --model piper/joe --concurrency 1,16,64 \
    --json "$OUT/piper.json"
else
  echo "== piper: skipped (the piper extra is not installed on this machine)"
fi
echo "== done in ${SECONDS}s; results in $OUT"
