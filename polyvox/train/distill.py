"""Distillation: train the student on teacher data, with checkpoints and resume.

    python -m polyvox.train.distill --data DIR --out DIR --steps N [--config YAML]

A rerun with the same --out resumes from OUT/checkpoint.pt (weights, optimizer, step) and
continues to --steps. Everything random in a step (batch order, chained prefixes, flow
noise) is drawn from generators seeded by (seed, step), so a resumed run takes exactly
the steps an uninterrupted one would. At the end the student is exported to
OUT/model.safetensors + OUT/config.yaml (checkpoints.py). Progress goes to OUT/log.jsonl.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch

from polyvox.models.joe_ar.network import (
    DEFAULT_CONFIG,
    StudentConfig,
    build_student,
    config_to_dict,
    exported_layers,
    load_config,
    read_student_weights,
    silence_layers,
)
from polyvox.train.batches import Example, LatentStats, make_batch, make_examples, plan_batches
from polyvox.train.checkpoints import export_student, load_checkpoint, save_checkpoint
from polyvox.train.student import Batch, LossWeights, count_parameters, student_losses
from polyvox.train.teacher_data import Utterance, read_data, read_manifest

VALIDATION_EVERY = 50  # one utterance in 50 is held out for the validation loss
FAST_SPEED = 1.15  # effective speeds from here are "fast" for TrainConfig.fast_repeats


class Item(NamedTuple):
    """A batch row: a training clause, optionally after the tail of another one."""

    clause: int  # the clause trained on
    prefix: int  # the clause before it, -1 for none
    keep: int  # positions of the prefix kept (its tail)


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    learning_rate: float = 1e-3  # peak, after warmup; cosine decay to 10% at `steps`
    warmup_steps: int = 200
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    batch_positions: int = 3000  # padded positions per batch
    chain_probability: float = 0.3  # a batch row preceded by another clause (chained mode)
    # A paragraph's later sentence is preceded by the sentence before it this often (by a
    # random clause at chain_probability otherwise).
    paragraph_chain_probability: float = 0.7
    # Each clause at an effective speed of FAST_SPEED or more is trained on this many times
    # an epoch (fast speech is the sparsest data: ~16% of data-v2's utterances).
    fast_repeats: int = 1
    # A chained row keeps a tail of the clause before it: any tail (None), or its AR steps
    # and at most this many of its last phoneme ids. An engine that drops the earlier
    # clause's ids in whole KV blocks of 16 keeps 0-15 of them (docs/posttrain.md).
    prefix_ids: int | None = None
    checkpoint_every: int = 100
    log_every: int = 10
    validation_size: int = 32
    seed: int = 0
    losses: LossWeights = field(default_factory=LossWeights)
    # The training step's matrix products in bfloat16 (torch.autocast; weights, optimizer
    # and validation stay float32): ~1.5x faster on CPUs with AMX (docs/distill.md)
    bf16: bool = False
    device: str = "cpu"  # where the student trains ("cuda" on a GPU); data stays on the CPU

    def __post_init__(self) -> None:
        if self.steps < 0 or self.checkpoint_every < 1 or self.batch_positions < 1:
            raise ValueError("steps >= 0, checkpoint_every >= 1 and batch_positions >= 1")
        if self.fast_repeats < 1:
            raise ValueError("fast_repeats must be >= 1")
        if self.prefix_ids is not None and self.prefix_ids < 0:
            raise ValueError("prefix_ids must be >= 0 (or None for any tail)")

    def learning_rate_at(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.learning_rate * (step + 1) / self.warmup_steps
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.steps - self.warmup_steps))
        return self.learning_rate * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def _to(batch: Batch, device: str) -> Batch:
    return batch if device == "cpu" else Batch(*(t.to(device) for t in batch))


class Distiller:
    """The student, its optimizer and data; `train()` runs to `config.steps`."""

    def __init__(self, student: StudentConfig, config: TrainConfig,
                 data: Path | Sequence[Path], out: Path, log: bool = True,
                 init: Path | None = None, data_repeats: Sequence[int] | None = None) -> None:
        """`data`: one teacher data directory or several, read in order; `data_repeats`:
        how many times an epoch each directory's clauses are trained on (1 each by
        default). `init`: an exported student to start from when `out` has no checkpoint
        yet (its weights and latent statistics; the optimizer starts fresh). Distillation
        trains no pointer head (`polyvox train pointer` adds one to its export): the
        student is built without one, and an init export's head is left out."""
        student = dataclasses.replace(student, pointer_width=0)
        self.student, self.config, self.out, self.log = student, config, Path(out), log
        directories = [Path(data)] if isinstance(data, (str, Path)) else [Path(d) for d in data]
        repeats = list(data_repeats) if data_repeats is not None else [1] * len(directories)
        if not directories or len(repeats) != len(directories) or min(repeats) < 1:
            raise ValueError("give one or more data directories and, if any, one repeat "
                             f"count >= 1 for each (got {len(directories)} and {repeats})")
        self.out.mkdir(parents=True, exist_ok=True)
        utterances, source = [], []
        for number, directory in enumerate(directories):
            found = self._read_directory(directory, student)
            utterances += found
            source += [number] * len(found)
        # Every utterance is an example (a paragraph's sentence may precede another as
        # context); one in VALIDATION_EVERY is held out from training.
        self.examples = make_examples(utterances, student.frames_per_step)
        held = [i for i in range(len(utterances)) if i % VALIDATION_EVERY == 1]
        self.training = [i for i in range(len(utterances)) if i % VALIDATION_EVERY != 1] or held
        self.validation = [self.examples[i]._replace(previous=-1)
                           for i in held[: config.validation_size]]
        kept = [utterances[i] for i in self.training]
        # an epoch: every training clause once, a fast one fast_repeats times
        self.training_epoch = [
            i for i in self.training
            for _ in range(repeats[source[i]]
                           * (config.fast_repeats if self.examples[i].speed >= FAST_SPEED else 1))]
        self.lengths = [example.length for example in self.examples]
        torch.manual_seed(config.seed)  # the initial weights
        self.model = build_student(student).to(config.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.learning_rate,
                                           weight_decay=config.weight_decay)
        self.step = 0
        self._plans: list[list[list[Item]]] = []
        state = load_checkpoint(self.out)
        if state is None and init is not None:
            # A deeper student than the export (`--layers`) keeps the export's layers and
            # starts its extra ones as pass-throughs (silence_layers).
            have, want = exported_layers(init), student.flow_lm.transformer.num_layers
            if have > want:
                raise ValueError(f"{init} has {have} backbone layers, the student {want}: "
                                 "a student can only be deepened from an export")
            extra = tuple(f"transformer.layers.{index}." for index in range(have, want))
            read_student_weights(self.model, init,
                                 keep_missing=("prior_proj.", "speed_proj.", *extra),
                                 leave_out=("pointer_head.",))
            silence_layers(self.model, have)
        elif state is None:
            stats = LatentStats.of(kept, student.frames_per_step)
            self.model.emb_mean.copy_(stats.mean)
            self.model.emb_std.copy_(stats.std)
        else:
            # a field added to the config after the checkpoint was written takes its value
            current = config_to_dict(student)
            if {**current, **state["student"]} != current:
                raise ValueError(f"{self.out} holds a checkpoint of another student config: "
                                 "use another --out or the same --config")
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.step = state["step"]
        self.stats = LatentStats(self.model.emb_mean.cpu().clone(), self.model.emb_std.cpu().clone())

    # --- data --------------------------------------------------------------------------

    @staticmethod
    def _read_directory(data: Path, student: StudentConfig) -> list[Utterance]:
        """A data directory's utterances, checked against the student it trains."""
        manifest = read_manifest(data)
        target = manifest["target"]
        if target != student.teacher_latent:
            raise ValueError(f"{data} holds teacher latents {target!r} but the student "
                             f"generates {student.teacher_latent!r}: make data with "
                             f"--target {student.teacher_latent} or change the config")
        utterances = read_data(data)
        if any(u.speed != 1.0 for u in utterances):
            if not student.speed_input:
                raise ValueError(f"{data} holds speech at several speeds but the student has "
                                 "no speed input: pass --speed-input or use data at speed 1.0")
            if manifest["speed_label"] != "effective":
                raise ValueError(f"{data} labels its speeds with the teacher's argument, not "
                                 "the pace heard: run polyvox train teacher-data --out "
                                 f"{data} --relabel-speeds first")
        return utterances

    def _epoch_plan(self, epoch: int) -> list[list[Item]]:
        """An epoch's batches: every training clause once, a share of them chained after
        the tail of the sentence before it in its paragraph or of another clause, grouped
        by total length."""
        rng = random.Random(self.config.seed * 1_000_003 + epoch)
        items = []
        for index in self.training_epoch:
            previous = self.examples[index].previous
            if previous >= 0 and rng.random() < self.config.paragraph_chain_probability:
                items.append(Item(index, previous, self._keep(previous, rng)))
            elif rng.random() < self.config.chain_probability:
                prefix = self.training[rng.randrange(len(self.training))]
                items.append(Item(index, prefix, self._keep(prefix, rng)))
            else:
                items.append(Item(index, -1, 0))
        lengths = [self.lengths[item.clause] + item.keep for item in items]
        return [[items[i] for i in batch]
                for batch in plan_batches(lengths, self.config.batch_positions, rng)]

    def _keep(self, prefix: int, rng: random.Random) -> int:
        """How many of the last positions of clause `prefix` a chained row keeps."""
        longest = self.lengths[prefix]
        if self.config.prefix_ids is not None:
            audio = longest - len(self.examples[prefix].tokens)  # its AR steps (and BOS)
            longest = min(longest, audio + rng.randint(0, self.config.prefix_ids))
        return rng.randint(1, longest)

    def _batch_items(self, step: int) -> list[Item]:
        """The step-th batch of the endless sequence of epochs."""
        position, epoch = step, 0
        while True:
            while len(self._plans) <= epoch:
                self._plans.append(self._epoch_plan(len(self._plans)))
            if position < len(self._plans[epoch]):
                return self._plans[epoch][position]
            position -= len(self._plans[epoch])
            epoch += 1

    def batch(self, step: int) -> Batch:
        items = self._batch_items(step)
        prefixes: list[tuple[Example, int] | None] = [
            (self.examples[item.prefix], item.keep) if item.prefix >= 0 else None
            for item in items
        ]
        return _to(make_batch([self.examples[item.clause] for item in items], self.stats,
                              random.Random(self.config.seed * 7919 + step), prefixes),
                   self.config.device)

    # --- training ----------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        self.model.train()
        batch = self.batch(self.step)
        generator = torch.Generator().manual_seed(self.config.seed * 104_729 + self.step)
        device = batch.tokens.device.type
        with torch.autocast(device, dtype=torch.bfloat16, enabled=self.config.bf16):
            losses = student_losses(self.model, batch, self.config.losses, generator)
        for group in self.optimizer.param_groups:
            group["lr"] = self.config.learning_rate_at(self.step)
        self.optimizer.zero_grad(set_to_none=True)
        losses["total"].backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.optimizer.step()
        self.step += 1
        record = {name: float(value.detach()) for name, value in losses.items()}
        return record | {"positions": float(batch.tokens.numel())}

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Losses on the held-out utterances, with fixed noise (comparable across steps)."""
        self.model.eval()
        if not self.validation:
            return {}
        rng = random.Random(0)
        generator, emitted = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
        totals: dict[str, float] = {}
        chunks = [self.validation[i: i + 8] for i in range(0, len(self.validation), 8)]
        for chunk in chunks:
            batch = _to(make_batch(chunk, self.stats, rng), self.config.device)
            losses = student_losses(self.model, batch, self.config.losses, generator, emitted)
            for name, value in losses.items():
                totals[name] = totals.get(name, 0.0) + float(value) / len(chunks)
        return totals

    def save(self) -> None:
        save_checkpoint(self.out, {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
            "student": config_to_dict(self.student),
            "train": dataclasses.asdict(self.config),
        })

    def train(self) -> None:
        """Run to `config.steps`, checkpointing every `checkpoint_every` steps and at the
        end, then export."""
        if self.log and self.step == 0:
            print(f"student: {count_parameters(self.model):,} parameters, "
                  f"{len(self.examples)} training utterances", flush=True)
        with open(self.out / "log.jsonl", "a", encoding="utf-8") as log:
            while self.step < self.config.steps:
                start = time.monotonic()
                losses = self.train_step()
                record = {"step": self.step, "seconds": round(time.monotonic() - start, 4),
                          **{k: round(v, 5) for k, v in losses.items()}}
                if self.step % self.config.checkpoint_every == 0 or self.step == self.config.steps:
                    record.update({f"val_{k}": round(v, 5) for k, v in self.validate().items()})
                    self.save()
                log.write(json.dumps(record) + "\n")
                log.flush()
                if self.log and (self.step % self.config.log_every == 0 or "val_total" in record):
                    print(json.dumps(record), flush=True)
        export_student(self.model, self.student, self.out)


def with_layers(student: StudentConfig, layers: int) -> StudentConfig:
    """The student with `layers` backbone layers (the rest of its config unchanged)."""
    flow_lm = student.flow_lm
    backbone = dataclasses.replace(flow_lm.transformer, num_layers=layers)
    return dataclasses.replace(student, flow_lm=dataclasses.replace(flow_lm, transformer=backbone))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Distil the Piper teacher into a Pocket-"
                                                 "family student (resumes from --out).")
    parser.add_argument("--data", type=Path, required=True, nargs="+",
                        help="teacher data directories (one or more, read in order)")
    parser.add_argument("--data-repeats", type=int, nargs="+", metavar="N",
                        help="times an epoch each --data directory's clauses are trained on "
                             "(one count per directory; default 1 each)")
    parser.add_argument("--out", type=Path, required=True, help="run directory")
    parser.add_argument("--steps", type=int, required=True, help="total optimizer steps")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="student YAML")
    parser.add_argument("--lr", type=float, default=TrainConfig.learning_rate)
    parser.add_argument("--warmup", type=int, default=TrainConfig.warmup_steps)
    parser.add_argument("--batch-positions", type=int, default=TrainConfig.batch_positions)
    parser.add_argument("--checkpoint-every", type=int, default=TrainConfig.checkpoint_every)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--init", type=Path, help="start from this exported student "
                        "(model.safetensors) when --out has no checkpoint yet")
    parser.add_argument("--speed-input", action="store_true",
                        help="give the student a pace input (data made with --varied-speed); "
                             "an --init export without one starts it at zero")
    parser.add_argument("--layers", type=int, metavar="N",
                        help="backbone layers (default: the config's); more than the --init "
                             "export has deepens it, the new layers starting as pass-throughs")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda on a GPU")
    parser.add_argument("--bf16", action="store_true",
                        help="the step's matrix products in bfloat16 (autocast; weights stay "
                             "float32): faster on CPUs with AMX and on GPUs")
    parser.add_argument("--fast-repeats", type=int, default=1,
                        help=f"train on each clause at an effective speed >= {FAST_SPEED} "
                             "this many times an epoch")
    parser.add_argument("--prefix-ids", type=int, metavar="N",
                        help="a chained row keeps the earlier clause's AR steps and at most "
                             "N of its phoneme ids (default: any tail)")
    parser.add_argument("--emitted-loss", type=float, default=0.0,
                        help="weight of the loss on the step generation emits (the mean of "
                             "the config's head draws); 0: off, still reported in validation")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = TrainConfig(steps=args.steps, learning_rate=args.lr, warmup_steps=args.warmup,
                         batch_positions=args.batch_positions,
                         checkpoint_every=args.checkpoint_every, seed=args.seed, bf16=args.bf16,
                         device=args.device, fast_repeats=args.fast_repeats,
                         prefix_ids=args.prefix_ids)
    student = load_config(args.config)
    if args.emitted_loss < 0:
        parser.error("--emitted-loss must be >= 0")
    config = dataclasses.replace(config, losses=LossWeights(
        emitted=args.emitted_loss, emitted_draws=student.head_draws,
        emitted_temperature=student.default_temperature))
    if args.speed_input:
        student = dataclasses.replace(student, speed_input=True)
    if args.layers is not None:
        if args.layers < 1:
            parser.error("--layers must be >= 1")
        student = with_layers(student, args.layers)
    Distiller(student, config, args.data, args.out, init=args.init,
              data_repeats=args.data_repeats).train()


if __name__ == "__main__":
    main()
