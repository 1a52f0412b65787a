"""Train a pointer head on a distilled student (docs/distill.md, session 28).

    polyvox train pointer --data DIR [DIR ...] --init EXPORT --out RUN
        [--utterances 5000] [--epochs 10] [--width 512] [--chain P] [--threads 2] [--seed 0]

The student's frames are the teacher's prior: one encoding per phoneme id, repeated for
the id's duration. The flow head regresses them, and where the student is unsure when
the next id starts it emits a blend of the two (word merges: docs/distill.md, session
27). A pointer head instead reads each step's state (the flow head's conditioning, from
the frozen backbone) and classifies which of the step's G frames start the next id, one
of 2^G patterns; generation then copies the teacher's encoding of each id pointed at
(network.pointer_step), and the backbone reads back exact teacher frames.

Steps, each resumable: (1) run the frozen export over the data by teacher forcing and
keep each step's state and pattern (RUN/states.pt, the first tenth of the shuffled
utterances held out; with `--chain P`, a share P of the utterances is forced after the
tail of another clause's generated steps, its text dropped, as the engine's `audio`
chaining holds it: the sentence before it in its paragraph where it has one); (2) train
the head, a checkpoint after every epoch (RUN/checkpoint.pt, RUN/log.jsonl); (3) write
RUN/export: the export's tensors plus the head, its config with `pointer_width`. The
backbone, flow head and EOS head are unchanged.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F

from polyvox.models.joe_ar.network import (
    DEFAULT_CONFIG,
    PointerHead,
    load_student,
    pointer_context,
    step_patterns,
    teacher_pointers,
)
from polyvox.models.layers.attention import ContiguousKV
from polyvox.train.batches import Example, LatentStats, fresh_batch, make_examples
from polyvox.train.checkpoints import export_student, load_checkpoint, save_checkpoint
from polyvox.train.student import teacher_forcing
from polyvox.train.teacher_data import Utterance, read_data

STATES = "states.pt"
LOG = "log.jsonl"


@dataclass(frozen=True)
class PointerConfig:
    data: tuple[str, ...]
    init: str  # the student export the head is trained on
    utterances: int = 5000
    epochs: int = 10
    width: int = 512
    lr: float = 1e-3
    seed: int = 0
    batch: int = 512  # steps per head update
    context: bool = False  # the head also reads the pointer's context (pointer_context)
    chain: float = 0.0  # share of utterances forced after another clause's audio tail
    window: int = 128  # the most positions of such a tail (the engine's context window)


def _config_path(init: str) -> Path:
    """The config beside an export, else the shipped one (for the shipped weights)."""
    beside = Path(init).parent / "config.yaml"
    return beside if beside.is_file() else DEFAULT_CONFIG


Prefix = tuple[Utterance, int]  # a clause and how many of its last positions stay


def collect(flow_lm: torch.nn.Module, utterances: list[Utterance], frames_per_step: int,
            batch_size: int = 16, prefixes: Sequence[Prefix | None] | None = None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Teacher forcing over the utterances (clean inputs: what a pointer student reads
    back), each in a fresh context or after prefixes[i] (the last `keep` positions of
    another clause spoken before it: _after_tail): each step's state [M, d] (float16),
    pattern [M], and the pointer's context where the teacher's pointer stands
    [M, 2C + G + 1] (float16)."""
    stats = LatentStats(flow_lm.emb_mean.detach(), flow_lm.emb_std.detach())
    prefixes = prefixes or [None] * len(utterances)
    states, patterns, contexts = [], [], []
    with torch.no_grad():
        for start in range(0, len(utterances), batch_size):
            chunk = utterances[start: start + batch_size]
            examples = make_examples(chunk, frames_per_step)
            before = prefixes[start: start + batch_size]
            # the fresh rows in one batch; each chained row after its own clause
            fresh = [example for example, prefix in zip(examples, before) if prefix is None]
            if fresh:
                batch = fresh_batch(fresh, stats)
                hidden, _ = teacher_forcing(flow_lm, batch)
                forced = iter(hidden[batch.has_target].split(
                    batch.has_target.sum(1).tolist()))
            for example, prefix in zip(examples, before):
                row = next(forced) if prefix is None else \
                    _after_tail(flow_lm, example, *prefix, stats, frames_per_step)
                states.append(row.half())
            for utterance, example in zip(chunk, examples):
                steps = len(example.latents)
                patterns.append(step_patterns(utterance.durations, steps, frames_per_step))
                pointer, dwell = teacher_pointers(utterance.durations, steps, frames_per_step)
                encodings = flow_lm.normalize_features(example.features)
                contexts.append(pointer_context(
                    pointer, dwell, encodings[None].expand(steps, -1, -1),
                    torch.full((steps,), len(encodings)), frames_per_step).half())
    return torch.cat(states), torch.cat(patterns), torch.cat(contexts)


def _after_tail(flow_lm: torch.nn.Module, example: Example, clause: Utterance, keep: int,
                stats: LatentStats, frames_per_step: int) -> torch.Tensor:
    """One example's states [S, d] as the engine's `audio` chaining computes them: the
    clause before spoken into a KV store (forced on its teacher frames), all but its last
    `keep` positions dropped (their keys as computed then, with its text in view), and
    the example forced after them."""
    transformer = flow_lm.transformer
    kv = ContiguousKV(transformer.num_layers, transformer.kv_heads, transformer.head_dim,
                      torch.float32, torch.device("cpu"))
    (spoken,) = make_examples([clause], frames_per_step)
    teacher_forcing(flow_lm, fresh_batch([spoken], stats), kv)
    kv.drop_before(kv.start + kv.length - keep)
    batch = fresh_batch([example], stats)
    batch = batch._replace(positions=batch.positions + kv.start + kv.length)
    hidden, _ = teacher_forcing(flow_lm, batch, kv)
    return hidden[0][batch.has_target[0]]


def chained_prefixes(everything: list[Utterance], order: list[int], share: float,
                     window: int, frames_per_step: int, rng: random.Random
                     ) -> list[Prefix | None]:
    """For each utterance everything[i], i in `order`: with probability `share`, the
    clause it is forced after and how many of that clause's last positions stay (1 up to
    its generated steps and BOS, at most `window`: its text never stays, as in `audio`
    chaining). The clause is the sentence before it in its paragraph (data order, as
    make_examples links them) where it has one, else a random other utterance."""
    prefixes: list[Prefix | None] = []
    for index in order:
        if share <= 0 or rng.random() >= share:
            prefixes.append(None)
            continue
        utterance = everything[index]
        before = index - 1 if utterance.part > 0 and index > 0 else rng.randrange(len(everything))
        steps = -(-len(everything[before].latents) // frames_per_step) + 1  # and BOS
        prefixes.append((everything[before], rng.randint(1, min(steps, window))))
    return prefixes


def pattern_scores(logits: torch.Tensor, patterns: torch.Tensor,
                   frames_per_step: int) -> dict[str, float]:
    """Cross-entropy, exact-pattern accuracy and per-frame accuracy of the argmax."""
    chosen = logits.argmax(1)
    shifts = torch.arange(frames_per_step)
    frame = ((chosen[:, None] >> shifts) & 1) == ((patterns[:, None] >> shifts) & 1)
    return {"loss": float(F.cross_entropy(logits, patterns)),
            "pattern_accuracy": float((chosen == patterns).float().mean()),
            "frame_accuracy": float(frame.float().mean())}


def _states(out: Path, config: PointerConfig, flow_lm: torch.nn.Module,
            frames_per_step: int) -> dict[str, torch.Tensor]:
    path = out / STATES
    if path.exists():
        saved: dict[str, torch.Tensor] = torch.load(path)
        return saved
    everything = [u for data in config.data for u in read_data(Path(data))]
    order = list(range(len(everything)))
    random.Random(config.seed).shuffle(order)
    order = order[: config.utterances]
    utterances = [everything[i] for i in order]
    prefixes = chained_prefixes(everything, order, config.chain, config.window,
                                frames_per_step, random.Random(config.seed + 1))
    held = max(1, len(utterances) // 10)
    began = time.time()
    val_x, val_y, val_c = collect(flow_lm, utterances[:held], frames_per_step,
                                  prefixes=prefixes[:held])
    x, y, c = collect(flow_lm, utterances[held:], frames_per_step, prefixes=prefixes[held:])
    print(f"states: {len(y)} train steps, {len(val_y)} held out, {time.time() - began:.0f} s",
          flush=True)
    saved = {"x": x, "y": y, "c": c, "val_x": val_x, "val_y": val_y, "val_c": val_c}
    temporary = path.with_suffix(".tmp")
    torch.save(saved, temporary)
    temporary.rename(path)
    return saved


def train(out: Path, config: PointerConfig) -> Path:
    """Run (or resume) the three steps; returns the export's weights path."""
    out.mkdir(parents=True, exist_ok=True)
    settings = out / "pointer.json"
    if settings.exists():
        # a run from before a setting existed had its default
        saved = asdict(PointerConfig(**json.loads(settings.read_text())))
        if json.loads(json.dumps(saved)) != json.loads(json.dumps(asdict(config))):
            raise ValueError(f"{out} holds a pointer run with other settings ({settings}); "
                             "use a new --out")
    else:
        settings.write_text(json.dumps(asdict(config), indent=1))
    # an export that has a pointer head already gets a new one (the rest is unchanged)
    student, flow_lm = load_student(_config_path(config.init), config.init)
    group = student.frames_per_step
    data = _states(out, config, flow_lm, group)
    torch.manual_seed(config.seed)
    head = PointerHead(flow_lm.d_model, group, config.width,
                       student.latent_channels if config.context else 0)

    def logits(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return head(x.float(), c.float() if config.context else None)

    optimizer = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=0.01)
    per_epoch = len(data["y"]) // config.batch
    if per_epoch < 1:
        raise ValueError(f"{len(data['y'])} steps of data: fewer than one batch "
                         f"({config.batch}); give more --utterances")
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, config.lr,
                                                   total_steps=config.epochs * per_epoch)
    epoch = 0
    if (state := load_checkpoint(out)) is not None:
        head.load_state_dict(state["head"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        epoch = int(state["epoch"])
    while epoch < config.epochs:
        began = time.time()
        order = torch.randperm(len(data["y"]),
                               generator=torch.Generator().manual_seed(config.seed * 1000 + epoch))
        head.train()
        total = 0.0
        for index in range(per_epoch):
            pick = order[index * config.batch: (index + 1) * config.batch]
            loss = F.cross_entropy(logits(data["x"][pick], data["c"][pick]), data["y"][pick])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            total += float(loss.detach())
        epoch += 1
        head.eval()
        with torch.no_grad():
            scores = pattern_scores(logits(data["val_x"], data["val_c"]), data["val_y"], group)
        line = {"epoch": epoch, "loss": total / per_epoch,
                **{f"val_{name}": value for name, value in scores.items()},
                "seconds": time.time() - began}
        with open(out / LOG, "a", encoding="utf-8") as log:
            log.write(json.dumps(line) + "\n")
        print(json.dumps(line), flush=True)
        save_checkpoint(out, {"head": head.state_dict(), "optimizer": optimizer.state_dict(),
                              "schedule": schedule.state_dict(), "epoch": epoch})
    return export(out, config, head)


def export(out: Path, config: PointerConfig, head: PointerHead) -> Path:
    """The init export with the head: RUN/export/{model.safetensors, config.yaml}."""
    student, model = load_student(_config_path(config.init), config.init)
    model.pointer_head = head.eval()  # replaces one the export had
    student = replace(student, pointer_width=config.width, pointer_context=config.context,
                      weights_path=None)
    weights, _ = export_student(model, student, out / "export", torch.float16)
    return weights


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", nargs="+", required=True, help="teacher data directories")
    parser.add_argument("--init", required=True, help="the student export (model.safetensors)")
    parser.add_argument("--out", type=Path, required=True, help="run directory")
    parser.add_argument("--utterances", type=int, default=PointerConfig.utterances)
    parser.add_argument("--epochs", type=int, default=PointerConfig.epochs)
    parser.add_argument("--width", type=int, default=PointerConfig.width)
    parser.add_argument("--lr", type=float, default=PointerConfig.lr)
    parser.add_argument("--seed", type=int, default=PointerConfig.seed)
    parser.add_argument("--context", action="store_true",
                        help="the head also reads the next two ids' encodings and how long "
                        "the pointer has stood (pointer_context)")
    parser.add_argument("--chain", type=float, default=PointerConfig.chain, metavar="P",
                        help="share of utterances forced after another clause's audio tail "
                        "(the engine's `audio` chaining)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = PointerConfig(tuple(args.data), args.init, args.utterances, args.epochs,
                           args.width, args.lr, args.seed, context=args.context,
                           chain=args.chain)
    weights = train(args.out, config)
    print(f"pointer student -> {weights}")


if __name__ == "__main__":
    main()
