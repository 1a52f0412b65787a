"""Memory-mapped weights against read-and-copied ones (issue #23), for a Pocket model.

    python scripts/weights_mmap.py [--model english] [--runs 3]

Exports the model's seeded random weights to a safetensors file (this box has no real
ones; the loader cannot tell the difference), then loads it in fresh processes,
alternating "mapped" (the loader: modules built on meta, given the mapped tensors) and
"copied" (the loader before: modules allocated and initialized, the file read by
safetensors, copied in), each loading the model as `polyvox serve` does (load_model:
precision float32, linear weights prepacked). Each process reports its
"files read" and "weights placed" seconds and its memory once loaded and every weight
read once, as serving does (from
/proc/self/smaps_rollup): resident (RSS) and anonymous (the process's own pages, not
backed by a file). The mapped file's pages are the page cache's, which every replica on
the machine shares, so the anonymous memory is what each replica adds. Medians and
ranges of --runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, sys, time
import polyvox.models.pocket.loader as loader
from polyvox.models.pocket import weights
from polyvox.models.registry import load_model
from polyvox.startup import StartupTimes

import safetensors.torch

def read_and_copy(model, path):
    # the loader before mapping: modules allocated and initialized, the file read by
    # safetensors, its tensors copied into them
    model.to_empty(device="cpu")
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()
    with weights.startup_part("files read"):
        tensors = safetensors.torch.load_file(str(path))
    weights.load_strict(model, tensors, str(path), assign=False)

if sys.argv[3] == "copied":
    loader.load_checkpoint = read_and_copy
times = StartupTimes()
began = time.perf_counter()
with times.collecting():
    family = load_model("pocket/" + sys.argv[4], weights=sys.argv[1], tokenizer=sys.argv[2])
total = time.perf_counter() - began
for tensor in family.modules.state_dict().values():  # serving reads every weight
    float(tensor.float().sum())
memory = {}
with open("/proc/self/smaps_rollup") as rollup:
    for line in rollup:
        name, _, rest = line.partition(":")
        if name in ("Rss", "Anonymous"):
            memory[name] = int(rest.split()[0]) / 1024
files = times.phases.get("files read", 0.0)
print(json.dumps({"files_read": files, "weights_placed": total - files, "rss_mb": memory["Rss"],
                  "anonymous_mb": memory["Anonymous"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="english")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from polyvox.models.pocket.loader import get_config
    from polyvox.models.pocket.local_tokenizer import train_local_tokenizer
    from polyvox.models.pocket.model import PocketModules
    from polyvox.models.pocket.weights import random_init
    import safetensors.torch

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.safetensors"
        modules = PocketModules(get_config(args.model))
        random_init(modules, 0)
        safetensors.torch.save_file({k: v.contiguous() for k, v in modules.state_dict().items()},
                                    str(path))
        tokenizer = train_local_tokenizer(kind=get_config(args.model).flow_lm.lookup_table.tokenizer)
        print(f"{args.model}: {path.stat().st_size / 2**20:.0f} MiB of weights")
        results: dict[str, list[dict]] = {"mapped": [], "copied": []}
        for _ in range(args.runs):
            for mode in results:
                out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(tokenizer),
                                      mode, args.model], capture_output=True, text=True,
                                     check=True)
                results[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    for mode, runs in results.items():
        parts = []
        for key in ("files_read", "weights_placed", "rss_mb", "anonymous_mb"):
            values = [run[key] for run in runs]
            unit = " s" if "mb" not in key else " MiB"
            digits = 2 if "mb" not in key else 0
            parts.append(f"{key} {statistics.median(values):.{digits}f}{unit} "
                         f"({min(values):.{digits}f}-{max(values):.{digits}f})")
        print(f"{mode}: " + ", ".join(parts))


if __name__ == "__main__":
    main()
