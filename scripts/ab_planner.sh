#!/usr/bin/env bash
# A/B of this checkout's engine against another checkout's (e.g. a worktree of an older
# commit), in alternating runs of the same `polyvox bench` command, then medians per side.
#   bash scripts/ab_planner.sh OUT OTHER_CHECKOUT RUNS -- <polyvox bench args>
# e.g. git worktree add /tmp/legacy d8db821
#      bash scripts/ab_planner.sh /tmp/ab /tmp/legacy 3 -- --model piper/joe --modes batched \
#           --concurrency 8,16 --requests 2
# Both sides run with this checkout's virtual environment; PYTHONPATH picks the package.
set -euo pipefail
out=$1 other=$2 runs=$3
shift 3
[ "${1:-}" = "--" ] && shift
mkdir -p "$out"
here=$(pwd)
for run in $(seq 1 "$runs"); do
  for side in new old; do
    tree=$here
    [ "$side" = old ] && tree=$other
    echo "run $run, $side ($tree): polyvox bench $*" >&2
    PYTHONPATH=$tree "$here/.venv/bin/polyvox" bench "$@" --json "$out/$side-$run.json" \
      > "$out/$side-$run.log" 2>&1
  done
done
"$here/.venv/bin/python" "$here/scripts/ab_summary.py" "$out" | tee "$out/summary.txt"
