"""Flow-DPO for the student (issue 25; docs/posttrain.md): preference pairs of the
student's own clauses, the better one by the rewards (rewards.py), and a loss that
raises the policy's likelihood of the winner relative to the loser, measured against a
frozen reference (the distilled student).

A flow-matching head has no exact likelihood; as in Diffusion-DPO, its flow-matching
loss at a shared (t, noise) stands in for the negative log-likelihood. Per clause:

    d(x)   = flow loss of the policy on x - flow loss of the reference on x
             (mean over the clause's steps; the same t and noise for both models)
    e(x)   = EOS log-likelihood of the policy on x - of the reference on x
             (exact: the end-of-speech decisions are Bernoulli)
    margin = beta * (d(loser) - d(winner)) + eos_weight * (e(winner) - e(loser))
    loss   = -log sigmoid(margin)

The clause is fed back as the model produced it (no input noise), laid out exactly as
teacher forcing lays out training data (batches.py), with the clause's log speed.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F

from polyvox.models.joe_ar.network import StudentFlowLM
from polyvox.train.batches import Example, LatentStats, fresh_batch
from polyvox.train.checkpoints import export_student, load_checkpoint, save_policy
from polyvox.train.student import Batch, teacher_forcing

if TYPE_CHECKING:
    from polyvox.asr.transcribe import Transcriber
    from polyvox.models.joe_ar.family import StudentFamily
    from polyvox.train.rewards import ClauseRewards


class Pair(NamedTuple):
    """Two clauses spoken for the same text (and speed): the preferred one first."""

    winner: Example
    loser: Example
    margin: float  # reward(winner) - reward(loser)


@dataclass(frozen=True)
class DPOSettings:
    beta: float = 200.0  # scale of the flow-loss difference (per-step mean MSE)
    eos_weight: float = 1.0
    flow_samples: int = 4  # (t, noise) draws per step, shared by policy and reference
    # weight of the winner's own flow loss (against the reference's) added to the loss, as
    # RPO adds the chosen answer's NLL: without it the policy widens the margin by making
    # both clauses less likely (docs/posttrain.md, session 19)
    winner_weight: float = 0.0


def generated_example(tokens: torch.Tensor, latents: torch.Tensor,
                      features: torch.Tensor | None, flow_lm: StudentFlowLM,
                      speed: float = 1.0) -> Example:
    """A clause the student generated (normalized latents [S, D], as clause_latents
    returns them; `features` as its plan had them, or None) as a training example: its
    latents denormalized (make_batch normalizes them again), no attention guide."""
    steps, channels = latents.shape[0], flow_lm.feature_channels
    prior = features[:, :channels].detach() if features is not None \
        else torch.zeros(len(tokens), channels)
    return Example(tokens=tokens, latents=flow_lm.denormalize(latents).detach(),
                   band_low=torch.zeros(steps + 1, dtype=torch.long),
                   band_high=torch.full((steps + 1,), -1, dtype=torch.long),
                   features=prior, speed=speed)


def pair_batch(pairs: list[Pair], stats: LatentStats) -> Batch:
    """Winners then losers, one row each (in a fresh context)."""
    return fresh_batch([p.winner for p in pairs] + [p.loser for p in pairs], stats)


def row_scores(flow_lm: StudentFlowLM, batch: Batch, t: torch.Tensor,
               noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: the mean flow-matching loss over its steps at the given draws (t [K, M, 1],
    noise [K, M, D] for the M target positions in batch order), and the EOS
    log-likelihood of its end-of-speech decisions. Returns ([B], [B])."""
    hidden, eos_logits = teacher_forcing(flow_lm, batch)
    cond, target = hidden[batch.has_target], batch.targets[batch.has_target]  # [M, d], [M, D]
    losses = []
    for draw_t, draw_noise in zip(t, noise):
        x_t = (1 - draw_t) * draw_noise + draw_t * target
        velocity = flow_lm.flow_net(cond, draw_t, x_t)
        losses.append(((velocity - (target - draw_noise)) ** 2).mean(dim=-1))  # [M]
    per_position = torch.stack(losses).mean(dim=0)
    rows = batch.has_target.nonzero()[:, 0]  # the row of each target position
    count = torch.zeros(batch.tokens.shape[0]).index_add_(0, rows, torch.ones_like(per_position))
    flow = torch.zeros(batch.tokens.shape[0]).index_add_(0, rows, per_position) / count.clamp_min(1)
    eos = -F.binary_cross_entropy_with_logits(eos_logits, batch.eos_targets, reduction="none")
    eos = (eos * batch.has_eos).sum(dim=1)
    return flow, eos


def dpo_loss(policy: StudentFlowLM, reference: StudentFlowLM, pairs: list[Pair],
             stats: LatentStats, settings: DPOSettings, generator: torch.Generator
             ) -> dict[str, torch.Tensor]:
    """The loss of a batch of pairs ("loss"), and what it is made of, for the log."""
    batch = pair_batch(pairs, stats)
    positions = int(batch.has_target.sum())
    t = torch.rand(settings.flow_samples, positions, 1, generator=generator)
    noise = torch.randn(settings.flow_samples, positions, batch.targets.shape[-1],
                        generator=generator)
    flow, eos = row_scores(policy, batch, t, noise)
    with torch.no_grad():
        ref_flow, ref_eos = row_scores(reference, batch, t, noise)
    half = len(pairs)
    d, e = flow - ref_flow, eos - ref_eos
    margin = settings.beta * (d[half:] - d[:half]) + settings.eos_weight * (e[:half] - e[half:])
    loss = -F.logsigmoid(margin).mean() + settings.winner_weight * d[:half].mean()
    return {"loss": loss, "margin": margin.detach().mean(),
            "accuracy": (margin.detach() > 0).float().mean(),
            "winner_flow": flow[:half].detach().mean(), "loser_flow": flow[half:].detach().mean()}


# the least reward-total difference that makes a pair (weights sum to 3.75): 0.02 is one
# word in a clause of up to 13
MIN_MARGIN = 0.02


def make_pairs(candidates: list[tuple[Example, float]], min_margin: float = MIN_MARGIN
               ) -> Pair | None:
    """The best and the worst of one text's candidates (clause, reward), if their rewards
    differ by at least `min_margin` (closer ones teach noise)."""
    if len(candidates) < 2:
        return None
    ranked = sorted(candidates, key=lambda c: c[1], reverse=True)
    (best, high), (worst, low) = ranked[0], ranked[-1]
    return Pair(best, worst, high - low) if high - low >= min_margin else None


# --- rollouts: the student's own clauses, scored -----------------------------------------

@dataclass(frozen=True)
class RolloutSettings:
    group: int = 4  # clauses spoken per text (seeds)
    temperature: float | None = None  # None: the student's default
    min_margin: float = MIN_MARGIN
    varied_speed_share: float = 0.5  # texts at a random pace (a student with pace input)
    speeds: tuple[float, float] = (0.7, 1.5)


def prompt_speed(family: StudentFamily, index: int, settings: RolloutSettings,
                 seed: int) -> float:
    """The pace text `index` is spoken at (seeded): 1.0, or for a student with a pace
    input and a `varied_speed_share` of the texts, log-uniform in `settings.speeds`."""
    rng = random.Random(f"dpo-speed:{seed}:{index}")
    if not family.student.speed_input or rng.random() >= settings.varied_speed_share:
        return 1.0
    low, high = settings.speeds
    return round(low * (high / low) ** rng.random(), 3)


def teacher_seconds(family: StudentFamily, ids: list[int]) -> float:
    """How long the teacher takes for these ids at speed 1 (its noise-free durations)."""
    from polyvox.models.piper.front import Scales, Sentence

    assert family.front is not None
    generator = torch.Generator().manual_seed(0)
    (stage1,) = family.front.run_stage1([Sentence(ids, Scales(0.0, 1.0, 0.0), generator)])
    return int(stage1.durations.sum()) * family.hifigan.hop_length / family.sample_rate


def judge_clause(family: StudentFamily, latents: torch.Tensor, text: str,
                 target_seconds: float, transcriber: Transcriber) -> ClauseRewards:
    """The reward terms of one clause the student spoke (normalized latents [S, D]):
    decoded as the engine decodes it, heard by the judge, scored against `text`."""
    from polyvox.train.rewards import clause_rewards

    audio = family.decode(latents[None], family.new_decoder_state())[0].numpy()
    transcript = transcriber.transcribe(audio, family.sample_rate)
    return clause_rewards(audio, family.sample_rate, transcript, text, target_seconds)


@torch.no_grad()
def score_clauses(family: StudentFamily, text: str, speed: float, seeds: list[int],
                  transcriber: Transcriber, settings: RolloutSettings
                  ) -> list[tuple[Example, float, dict[str, float]]]:
    """Speak one clause once per seed; each as (example, total reward, reward log)."""
    from polyvox.models.joe_ar.family import StudentParams
    from polyvox.models.layers.attention import ContiguousKV

    ids = family.phoneme_ids(text)
    tokens = torch.tensor(ids, dtype=torch.long)
    features = family.text_features(ids, speed)
    target = teacher_seconds(family, ids) / speed
    scored = []
    for seed in seeds:
        params = StudentParams(seed=seed, temperature=settings.temperature, speed=speed)
        kv = ContiguousKV(*family.kv_shape, dtype=torch.float32, device=torch.device("cpu"))
        latents = family.clause_latents(tokens, kv, params, torch.Generator().manual_seed(seed))
        if not len(latents):
            continue
        rewards = judge_clause(family, latents, text, target, transcriber)
        example = generated_example(tokens, latents, features, family.flow_lm, speed)
        scored.append((example, rewards.total(), rewards.as_log()))
    return scored


# --- the run: pairs from the reference, then preference steps ----------------------------

@dataclass(frozen=True)
class DPOConfig:
    steps: int
    prompts: int = 512  # texts from the training grammar (never the eval sets)
    prompt_seed: int = 1000  # not a distillation data seed: texts the student never saw
    prompts_per_file: int = 32
    batch_pairs: int = 8
    learning_rate: float = 1e-5
    checkpoint_every: int = 50
    seed: int = 0
    loss: DPOSettings = field(default_factory=DPOSettings)
    rollouts: RolloutSettings = field(default_factory=RolloutSettings)


class DPORun:
    """Offline Flow-DPO: the reference (the exported student at `init`) speaks each
    prompt's clauses `group` times, the rewards pick pairs (OUT/pairs-NNNNN.pt, every
    clause's reward terms in OUT/rewards.jsonl), then the policy (a copy of it) takes
    `steps` DPO steps on them. Both phases resume: pair files already written are kept,
    and OUT/checkpoint.pt holds the policy, its optimizer and the step. The policy is
    exported to OUT/model.safetensors + config.yaml at the end."""

    def __init__(self, init: Path, out: Path, config: DPOConfig,
                 transcriber: Transcriber | None = None, log: bool = True) -> None:
        import copy

        from polyvox.models.joe_ar.family import load_student_family
        from polyvox.train.checkpoints import refuse_pointer_students

        self.out, self.config, self.log = Path(out), config, log
        self.out.mkdir(parents=True, exist_ok=True)
        self.family = load_student_family(weights=init)
        refuse_pointer_students(self.family, init, "Flow-DPO")
        self.reference = self.family.flow_lm.eval()
        self.policy = copy.deepcopy(self.reference)
        self.stats = LatentStats(self.reference.emb_mean.clone(), self.reference.emb_std.clone())
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=config.learning_rate)
        self.transcriber, self.step = transcriber, 0
        state = load_checkpoint(self.out)
        if state is not None:
            self.policy.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.step = int(state["step"])

    def pair_files(self) -> list[Path]:
        per_file = self.config.prompts_per_file
        return [self.out / f"pairs-{i:05d}.pt"
                for i in range(-(-self.config.prompts // per_file))]

    def collect(self) -> list[Pair]:
        """Every prompt's pair (those whose candidates differ enough), file by file."""
        from polyvox.text.clauses import split_text
        from polyvox.train.sentences import generate_sentences

        config, rollouts = self.config, self.config.rollouts
        prompts = list(generate_sentences(config.prompts, config.prompt_seed))
        pairs: list[Pair] = []
        for number, path in enumerate(self.pair_files()):
            if not path.exists():
                if self.transcriber is None:
                    from polyvox.asr.transcribe import Transcriber

                    self.transcriber = Transcriber(threads=torch.get_num_threads())
                first = number * config.prompts_per_file
                found, logs = [], []
                for index in range(first, min(first + config.prompts_per_file, len(prompts))):
                    speed = prompt_speed(self.family, index, rollouts, config.seed)
                    clauses = split_text(prompts[index], self.family.count_tokens, 350)
                    for place, clause in enumerate(clauses):
                        seeds = [config.seed * 1_000_003 + index * 101 + place * 11 + g
                                 for g in range(rollouts.group)]
                        scored = score_clauses(self.family, clause, speed, seeds,
                                               self.transcriber, rollouts)
                        logs += [{"prompt": index, "clause": place, "speed": speed, **log}
                                 for _, _, log in scored]
                        pair = make_pairs([(e, r) for e, r, _ in scored], rollouts.min_margin)
                        if pair is not None:
                            found.append(pair)
                temporary = path.with_suffix(".tmp")
                torch.save([tuple(pair) for pair in found], temporary)
                temporary.rename(path)
                with open(self.out / "rewards.jsonl", "a", encoding="utf-8") as file:
                    file.writelines(json.dumps(log) + "\n" for log in logs)
                if self.log:
                    print(f"{path.name}: {len(found)} pairs", flush=True)
            pairs += [Pair(*pair) for pair in torch.load(path, weights_only=False)]
        return pairs

    def train(self) -> None:
        pairs = self.collect()
        if not pairs:
            raise ValueError("no pair differs enough in reward: lower min_margin or add "
                             "prompts")
        config = self.config
        with open(self.out / "log.jsonl", "a", encoding="utf-8") as log:
            while self.step < config.steps:
                order = list(range(len(pairs)))
                epoch, offset = divmod(self.step * config.batch_pairs, len(pairs))
                random.Random(config.seed * 7_919 + epoch).shuffle(order)
                chosen = [pairs[order[(offset + i) % len(pairs)]]
                          for i in range(min(config.batch_pairs, len(pairs)))]
                self.policy.train()
                out = dpo_loss(self.policy, self.reference, chosen, self.stats, config.loss,
                               torch.Generator().manual_seed(config.seed * 104_729 + self.step))
                self.optimizer.zero_grad(set_to_none=True)
                out["loss"].backward()
                torch.nn.utils.clip_grad_norm_(self.policy.parameters(), 1.0)
                self.optimizer.step()
                self.step += 1
                record = {"step": self.step,
                          **{k: round(float(v.detach()), 5) for k, v in out.items()}}
                log.write(json.dumps(record) + "\n")
                log.flush()
                if self.step % config.checkpoint_every == 0 or self.step == config.steps:
                    save_policy(self.out, self.policy, self.optimizer, self.step,
                                self.family.student)
                    if self.log:
                        print(json.dumps(record), flush=True)
        export_student(self.policy.eval(), self.family.student, self.out)


def policy_run_parser(method: str) -> argparse.ArgumentParser:
    """The options every post-training run has (DPO, GRPO)."""
    parser = argparse.ArgumentParser(description=f"{method} on the student's own clauses "
                                                 "(docs/posttrain.md); resumes from --out.")
    parser.add_argument("--init", type=Path, required=True,
                        help="the exported student (model.safetensors, its config beside it)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = policy_run_parser("Flow-DPO")
    parser.add_argument("--prompts", type=int, default=DPOConfig.prompts)
    parser.add_argument("--group", type=int, default=RolloutSettings.group)
    parser.add_argument("--beta", type=float, default=DPOSettings.beta)
    parser.add_argument("--winner-weight", type=float, default=DPOSettings.winner_weight,
                        help="weight of the winner's flow loss against the reference's")
    parser.add_argument("--min-margin", type=float, default=RolloutSettings.min_margin,
                        help="the least reward difference that makes a pair")
    parser.add_argument("--lr", type=float, default=DPOConfig.learning_rate)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = DPOConfig(steps=args.steps, prompts=args.prompts, learning_rate=args.lr,
                       loss=DPOSettings(beta=args.beta, winner_weight=args.winner_weight),
                       rollouts=RolloutSettings(group=args.group,
                                                min_margin=args.min_margin))
    DPORun(args.init, args.out, config).train()


if __name__ == "__main__":
    main()
