#!/usr/bin/env bash
# A/B of two polyvox trees on one GPU, runs alternating (A, B, A, B, ...), then the CUDA
# tests of B. Each tree is a directory holding a `polyvox/` package (e.g. `git archive REV
# polyvox | tar -x -C DIR`). Made for the GPU machine (see scripts/gpu_check.sh).
#
#   scripts/gpu_ab.sh OUT_DIR A_DIR B_DIR [REPEATS] [CONCURRENCY]
set -uo pipefail
OUT=$(realpath -m "${1:?usage: scripts/gpu_ab.sh OUT_DIR A_DIR B_DIR [REPEATS] [CONCURRENCY]}")
A=$(realpath "$2"); B=$(realpath "$3"); REPEATS=${4:-3}; CONCURRENCY=${5:-64,128,256}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
exec > >(tee -a "$OUT/gpu_ab.log") 2>&1
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_SECONDS:-420}
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
[ -d .gpu-wheels/tokenizers ] && export POLYVOX_TOKENIZER_DIR=$PWD/.gpu-wheels/tokenizers
BENCH=(-m polyvox.cli bench --device cuda --modes batched --requests 1 --threads 4
       --max-running 256 --kv-memory-mb 16384 --model pocket/english --graphs cuda --overlap on)

step() {  # step NAME TREE SECONDS ARGS...: one bench run of TREE, within what is left
  local name=$1 tree=$2 limit=$3
  shift 3
  local left=$((BUDGET - SECONDS))
  ((limit > left)) && limit=$left
  ((limit < 20)) && { echo "== $name: skipped (no time left)"; return; }
  echo "== $name (limit ${limit}s, tree $tree)"
  local start=$SECONDS
  # Run inside the tree: `python -m` puts the working directory first on sys.path.
  (cd "$tree" && PYTHONPATH=$tree timeout --signal=ABRT --kill-after=10 "$limit" $PY "$@")
  echo "== $name: exit $? after $((SECONDS - start))s"
}

for ((run = 1; run <= REPEATS; run++)); do
  step "A run $run" "$A" 90 "${BENCH[@]}" --concurrency "$CONCURRENCY" --json "$OUT/a_$run.json"
  step "B run $run" "$B" 90 "${BENCH[@]}" --concurrency "$CONCURRENCY" --json "$OUT/b_$run.json"
done
echo "== done in ${SECONDS}s"
