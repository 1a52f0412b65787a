#!/usr/bin/env bash
# Where a start's time goes (issue #23), warm: kernels built and weights prefetched.
#
#   scripts/start_phases.sh [RUNS] [replicas]
#
# For piper/joe and pocket/english (its seeded random weights exported to a safetensors
# file, loaded as real weights would be: memory-mapped), RUNS alternating starts of
# `polyvox serve --calibrate-seconds 0`; each prints its "ready in" line. With "replicas"
# the server is `--replicas 1` and the line is the replica's phases (GET /v1/cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
mode=${2:-process}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python - "$work" <<'EOF'
import sys
import safetensors.torch
from polyvox.models.pocket.loader import get_config
from polyvox.models.pocket.local_tokenizer import train_local_tokenizer
from polyvox.models.pocket.model import PocketModules
from polyvox.models.pocket.weights import random_init
modules = PocketModules(get_config("english"))
random_init(modules, 0)
safetensors.torch.save_file({k: v.contiguous() for k, v in modules.state_dict().items()},
                            f"{sys.argv[1]}/english.safetensors")
tokenizer = train_local_tokenizer(kind=get_config("english").flow_lm.lookup_table.tokenizer)
open(f"{sys.argv[1]}/tokenizer", "w").write(str(tokenizer))
EOF
pocket="pocket/english --weights $work/english.safetensors --tokenizer $(cat "$work/tokenizer")"
extra=()
[ "$mode" = replicas ] && extra=(--replicas 1)
for _ in $(seq "$runs"); do
  for spec in "piper/joe" "$pocket"; do
    data=$(mktemp -d -p "$work")
    # shellcheck disable=SC2086
    .venv/bin/polyvox serve --model $spec --calibrate-seconds 0 --port 8931 \
      --data-dir "$data" "${extra[@]}" > "$data/log" 2>&1 &
    pid=$!
    for _ in $(seq 240); do grep -q "ready in" "$data/log" && break; sleep 0.5; done
    name=${spec%% *}
    if [ "$mode" = replicas ]; then
      echo "$name replica :: $(curl -s http://127.0.0.1:8931/v1/cluster | .venv/bin/python -c '
import json, sys
phases = json.load(sys.stdin)["replicas"][0]["startup_seconds"]
print(f"ready in {sum(phases.values()):.1f} s (" + ", ".join(
    f"{k} {v:.1f} s" for k, v in phases.items()) + ")")')"
    else
      echo "$name :: $(grep -o 'ready in.*' "$data/log")"
    fi
    kill "$pid"
    wait "$pid" 2>/dev/null || true
  done
done
