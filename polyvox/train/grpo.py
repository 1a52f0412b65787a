"""Flow-GRPO rollouts for the student (issue 25; docs/posttrain.md): a clause generated
with the head's SDE sampler (sde.py), keeping every step's path, and the clause's
log-probability under any policy, recomputed in one teacher-forcing pass, which is what
the GRPO ratio needs.

A clause's log-probability is the sum over its AR steps of the SDE transitions'
log-densities (the head's stochastic part), plus the log-likelihood of its end-of-speech
decisions read as Bernoulli (as in dpo.py). The engine's EOS rule thresholds the logit
and is not sampled; the Bernoulli term lets the objective move the logits all the same.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, cast

import torch
import torch.nn.functional as F

from polyvox.train import sde
from polyvox.train.batches import Example, LatentStats, fresh_batch
from polyvox.train.checkpoints import export_student, load_checkpoint, save_policy
from polyvox.train.dpo import RolloutSettings, generated_example, policy_run_parser
from polyvox.train.student import teacher_forcing

if TYPE_CHECKING:
    from polyvox.asr.transcribe import Transcriber
    from polyvox.models.joe_ar.family import StudentFamily, StudentParams
    from polyvox.models.joe_ar.network import StudentFlowLM


@dataclass(frozen=True)
class SDESettings:
    steps: int = 4  # SDE steps per AR step
    a: float = 0.5  # noise level (sde.noise_level); > 0 for a log-probability
    temperature: float = 0.2  # variance of the starting noise (the student's default)
    # > 1: the step's mean averaged over the noise's draws, as generation with the
    # student's head_draws (one step only: sde.transition)
    draws: int = 1

    def __post_init__(self) -> None:
        sde.check_sampler(self.steps, self.draws)


@dataclass(frozen=True)
class Rollout:
    example: Example  # the clause as a training row (latents = the paths' ends)
    paths: torch.Tensor  # [S, K + 1, D] each AR step's SDE path, normalized
    log_prob: float  # under the policy that generated it
    ended: bool  # its EOS logit ended it (else it ran to its length cap)


def _velocity(flow_lm: StudentFlowLM, cond: torch.Tensor) -> sde.Velocity:
    def velocity(x: torch.Tensor, t: float) -> torch.Tensor:
        # x may hold each row's draws, row-major (sde.transition)
        draws = x.shape[0] // cond.shape[0]
        rows = cond if draws == 1 else cond.repeat_interleave(draws, dim=0)
        return flow_lm.flow_net(rows, torch.full((x.shape[0], 1), t), x)

    return velocity


def _eos_log_likelihood(logits: torch.Tensor, ended: bool) -> torch.Tensor:
    """Bernoulli log-likelihood of the decisions: no end at every step but the last,
    an end at the last if the clause `ended`."""
    targets = torch.zeros_like(logits)
    if ended:
        targets[-1] = 1.0
    return -F.binary_cross_entropy_with_logits(logits, targets, reduction="sum")


@torch.no_grad()
def rollout_clause(family: StudentFamily, ids: list[int], params: StudentParams,
                   settings: SDESettings, generator: torch.Generator) -> Rollout:
    """Generate one clause as the engine would (its EOS rule, a fresh context), each AR
    step's latent drawn by the SDE sampler from N(0, temperature)."""
    from polyvox.models.joe_ar.family import MIN_STEPS_BEFORE_EOS
    from polyvox.models.layers.attention import ContiguousKV

    flow_lm = family.flow_lm
    tokens = torch.tensor(ids, dtype=torch.long)
    features = family.text_features(ids, params.speed)
    kv = ContiguousKV(*family.kv_shape, dtype=torch.float32, device=torch.device("cpu"))
    family.prefill_tokens(tokens, kv.next_positions(len(ids)), kv, features)
    kv.commit()
    latent = torch.full((1, family.latent_dim), float("nan"))
    paths, logits, total, ended = [], [], 0.0, False
    for index in range(family.max_frames(len(ids), params.speed)):
        hidden, logit = flow_lm.step_hidden(latent, kv.next_positions(1)[:, 0], kv)
        kv.commit()
        logits.append(logit)
        if index >= MIN_STEPS_BEFORE_EOS and float(logit) > family.eos_threshold(params):
            ended = True
            break
        start = torch.randn(1, family.latent_dim, generator=generator) \
            * math.sqrt(settings.temperature)
        path = sde.sample(_velocity(flow_lm, hidden), start, settings.steps, settings.a,
                          generator, settings.draws)
        total += float(sde.log_prob(_velocity(flow_lm, hidden), path, settings.a,
                                    settings.draws)[0])
        paths.append(torch.cat(path))  # [K + 1, D]
        latent = path[-1]
    eos = float(_eos_log_likelihood(torch.cat(logits), ended))
    stacked = torch.stack(paths) if paths else torch.zeros(0, settings.steps + 1,
                                                           family.latent_dim)
    example = generated_example(tokens, stacked[:, -1], features, flow_lm, params.speed)
    return Rollout(example, stacked, total + eos, ended)


@dataclass
class RolloutTerms:
    """One rollout under one model: per AR step and SDE step, the transition's
    log-density [S, K] and mean [S, K, D]; the stds (K) are the sampler's, shared by every
    model; the EOS decisions' log-likelihood."""

    log_probs: torch.Tensor
    means: torch.Tensor
    stds: list[float]
    eos: torch.Tensor

    @property
    def total(self) -> torch.Tensor:
        return self.log_probs.sum() + self.eos


def rollout_terms(flow_lm: StudentFlowLM, rollouts: list[Rollout], stats: LatentStats,
                  settings: SDESettings) -> list[RolloutTerms]:
    """Each rollout's terms under `flow_lm`, in one teacher-forcing pass (differentiable:
    the policy's side of the GRPO ratio)."""
    batch = fresh_batch([r.example for r in rollouts], stats)
    hidden, eos_logits = teacher_forcing(flow_lm, batch)
    terms = []
    for row, rollout in enumerate(rollouts):
        cond = hidden[row][batch.has_target[row]]  # [S, d], one per generated step
        states = list(rollout.paths.transpose(0, 1))  # K + 1 of [S, D]
        log_probs, means, stds = sde.transition_terms(_velocity(flow_lm, cond), states,
                                                      settings.a, settings.draws)
        # the logits at BOS and every latent input; a clause cut at its cap never stepped
        # its last latent
        logits = eos_logits[row][batch.has_eos[row]]
        eos = _eos_log_likelihood(logits if rollout.ended else logits[:-1], rollout.ended)
        terms.append(RolloutTerms(log_probs, means, stds, eos))
    return terms


def rollout_log_probs(flow_lm: StudentFlowLM, rollouts: list[Rollout], stats: LatentStats,
                      settings: SDESettings) -> torch.Tensor:
    """Each rollout's log-probability under `flow_lm` [R]."""
    return torch.stack([t.total for t in rollout_terms(flow_lm, rollouts, stats, settings)])


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """A group's rewards (the same text spoken G times) -> (r - mean) / std; all zero
    when the group agrees (nothing to learn from it)."""
    spread = rewards.std()
    if rewards.numel() < 2 or float(spread) < 1e-6:
        return torch.zeros_like(rewards)
    return (rewards - rewards.mean()) / spread


@dataclass(frozen=True)
class GRPOSettings:
    clip: float = 0.2  # PPO's ratio clip, per transition
    kl: float = 0.04  # weight of the KL to the reference
    # each SDE transition's log-ratio and KL divided by the latent's dimensions, as the
    # Flow-GRPO reference implementation averages them: summed over 768 dimensions, a
    # step of 1e-5 already pushes most ratios past the clip (docs/posttrain.md)
    per_dimension: bool = True


def grpo_loss(policy: StudentFlowLM, reference: StudentFlowLM, rollouts: list[Rollout],
              old: list[RolloutTerms], advantages: torch.Tensor, stats: LatentStats,
              sampler: SDESettings, settings: GRPOSettings = GRPOSettings()
              ) -> dict[str, torch.Tensor]:
    """Flow-GRPO's objective over the rollouts' transitions: per transition the clipped
    ratio to the policy that sampled it (`old`, detached) times its rollout's advantage,
    plus the KL to the reference, which for two Gaussians of the sampler's std is
    |mean - mean_ref|^2 / (2 std^2). The EOS decisions join as one more term per rollout.
    With `per_dimension`, a transition's log-ratio and KL are per latent dimension."""
    new = rollout_terms(policy, rollouts, stats, sampler)
    with torch.no_grad():
        ref = rollout_terms(reference, rollouts, stats, sampler)
    surrogate, kl, count = torch.zeros(()), torch.zeros(()), 0
    for now, then, anchor, advantage in zip(new, old, ref, advantages):
        scale = now.means.shape[-1] if settings.per_dimension else 1
        log_ratio = torch.cat([((now.log_probs - then.log_probs.detach()) / scale).flatten(),
                               (now.eos - then.eos.detach())[None]])
        ratio = log_ratio.exp()
        clipped = ratio.clamp(1 - settings.clip, 1 + settings.clip)
        surrogate = surrogate + torch.minimum(ratio * advantage, clipped * advantage).sum()
        variance = torch.tensor(now.stds) ** 2  # [K]
        kl = kl + (((now.means - anchor.means) ** 2).sum(dim=-1)
                   / (2 * variance * scale)).sum()
        count += log_ratio.numel()
    count = max(count, 1)
    loss = -(surrogate / count) + settings.kl * kl / count
    return {"loss": loss, "surrogate": surrogate.detach() / count, "kl": kl.detach() / count}


# --- the run: online rollouts from the policy, scored, then clipped steps ---------------

@dataclass(frozen=True)
class GRPOConfig:
    steps: int
    prompts_per_step: int = 4  # texts per step, each clause spoken `group` times
    prompts: int = 4096  # the prompt pool (the training grammar, never the eval sets)
    prompt_seed: int = 2000  # neither a distillation nor the DPO prompts' seed
    learning_rate: float = 1e-6
    updates_per_step: int = 1  # optimizer updates on one step's rollouts (PPO epochs)
    checkpoint_every: int = 10
    seed: int = 0
    sampler: SDESettings = field(default_factory=SDESettings)
    objective: GRPOSettings = field(default_factory=GRPOSettings)
    rollouts: RolloutSettings = field(default_factory=lambda: RolloutSettings(group=4))


class ScoredGroup(NamedTuple):
    """One clause spoken `group` times by the policy, with each rollout's reward log."""

    rollouts: list[Rollout]
    logs: list[dict[str, float]]


class GRPORun:
    """Online Flow-GRPO: each step the policy (from the exported student at `init`)
    speaks `prompts_per_step` prompts' clauses `group` times with the SDE sampler,
    whisper and the rewards score every clause, and the clipped objective with its KL to
    the reference (the `init` student, frozen) takes `updates_per_step` updates on the
    group-relative advantages. OUT/log.jsonl has every step's objective and mean reward
    terms, OUT/rewards.jsonl every rollout's; OUT/checkpoint.pt (policy, optimizer, step)
    resumes it, and everything random in a step is seeded by the step, so a resumed run
    goes on as an uninterrupted one would. The policy is exported to OUT at the end."""

    def __init__(self, init: Path, out: Path, config: GRPOConfig,
                 transcriber: Transcriber | None = None, log: bool = True) -> None:
        import copy

        from polyvox.models.joe_ar.family import load_student_family
        from polyvox.train.checkpoints import refuse_pointer_students

        self.out, self.config, self.log = Path(out), config, log
        self.out.mkdir(parents=True, exist_ok=True)
        self.family = load_student_family(weights=init)
        refuse_pointer_students(self.family, init, "Flow-GRPO")
        # rollouts run on the family's model: the policy
        self.policy = cast("StudentFlowLM", self.family.flow_lm.eval())
        self.reference = copy.deepcopy(self.policy).requires_grad_(False)
        self.stats = LatentStats(self.policy.emb_mean.clone(), self.policy.emb_std.clone())
        self.optimizer = torch.optim.AdamW(self.policy.parameters(), lr=config.learning_rate)
        self.transcriber, self.step = transcriber, 0
        self._prompts: list[str] | None = None
        state = load_checkpoint(self.out)
        if state is not None:
            self.policy.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.step = int(state["step"])

    def prompts(self, step: int) -> list[tuple[int, str]]:
        """The step's prompts (index in the pool, text): consecutive, cycling the pool."""
        from polyvox.train.sentences import generate_sentences

        if self._prompts is None:
            self._prompts = list(generate_sentences(self.config.prompts,
                                                    self.config.prompt_seed))
        count = self.config.prompts_per_step
        return [(i % len(self._prompts), self._prompts[i % len(self._prompts)])
                for i in range(step * count, (step + 1) * count)]

    @torch.no_grad()
    def speak(self, step: int) -> list[ScoredGroup]:
        """Every clause of the step's prompts, spoken `group` times and scored."""
        from polyvox.models.joe_ar.family import StudentParams
        from polyvox.text.clauses import split_text
        from polyvox.train.dpo import judge_clause, prompt_speed, teacher_seconds

        if self.transcriber is None:
            from polyvox.asr.transcribe import Transcriber

            self.transcriber = Transcriber(threads=torch.get_num_threads())
        config, family = self.config, self.family
        groups = []
        for index, text in self.prompts(step):
            speed = prompt_speed(family, index, config.rollouts, config.seed)
            for place, clause in enumerate(split_text(text, family.count_tokens, 350)):
                ids = family.phoneme_ids(clause)
                target = teacher_seconds(family, ids) / speed
                rollouts, logs = [], []
                for g in range(config.rollouts.group):
                    seed = (config.seed * 1_000_003 + step * 10_007 + index * 101
                            + place * 11 + g)
                    params = StudentParams(seed=seed, temperature=config.sampler.temperature,
                                           speed=speed)
                    rollout = rollout_clause(family, ids, params, config.sampler,
                                             torch.Generator().manual_seed(seed))
                    if not len(rollout.paths):
                        continue
                    rewards = judge_clause(family, rollout.paths[:, -1], clause, target,
                                           self.transcriber)
                    rollouts.append(rollout)
                    logs.append({"step": step, "prompt": index, "clause": place,
                                 "speed": speed, "seed": seed, **rewards.as_log()})
                groups.append(ScoredGroup(rollouts, logs))
        return groups

    def update(self, groups: list[ScoredGroup]) -> dict[str, float]:
        """The objective's updates on one step's groups; what they did, for the log."""
        rollouts, advantages = [], []
        for group in groups:
            totals = torch.tensor([log["total"] for log in group.logs])
            advantage = group_advantages(totals)
            if advantage.any():  # a group that agrees teaches nothing
                rollouts += group.rollouts
                advantages.append(advantage)
        if not rollouts:
            return {"groups_used": 0.0}
        advantage = torch.cat(advantages)
        with torch.no_grad():
            old = rollout_terms(self.policy, rollouts, self.stats, self.config.sampler)
        record: dict[str, float] = {"groups_used": float(len(advantages))}
        for _ in range(self.config.updates_per_step):
            out = grpo_loss(self.policy, self.reference, rollouts, old, advantage,
                            self.stats, self.config.sampler, self.config.objective)
            self.optimizer.zero_grad(set_to_none=True)
            out["loss"].backward()
            norm = torch.nn.utils.clip_grad_norm_(self.policy.parameters(), 1.0)
            self.optimizer.step()
            record |= {k: float(v.detach()) for k, v in out.items()}
            record["grad_norm"] = float(norm)
        return record

    def train(self) -> None:
        import time

        config = self.config
        with open(self.out / "log.jsonl", "a", encoding="utf-8") as log, \
                open(self.out / "rewards.jsonl", "a", encoding="utf-8") as rewards:
            while self.step < config.steps:
                began = time.perf_counter()
                groups = self.speak(self.step)
                logs = [entry for group in groups for entry in group.logs]
                rewards.writelines(json.dumps(entry) + "\n" for entry in logs)
                record = self.update(groups)
                self.step += 1
                means = {f"reward_{name}": sum(entry[name] for entry in logs) / len(logs)
                         for name in ("total", "intelligibility", "pace", "bounds", "silence",
                                      "repetition", "clipping", "spectrum", "wer")} \
                    if logs else {}
                entry = {"step": self.step, "rollouts": len(logs),
                         **{k: round(v, 6) for k, v in (record | means).items()},
                         "seconds": round(time.perf_counter() - began, 1)}
                log.write(json.dumps(entry) + "\n")
                log.flush()
                rewards.flush()
                if self.step % config.checkpoint_every == 0 or self.step == config.steps:
                    save_policy(self.out, self.policy, self.optimizer, self.step,
                                self.family.student)
                if self.log:
                    print(json.dumps(entry), flush=True)
        export_student(self.policy.eval(), self.family.student, self.out)


def main(argv: list[str] | None = None) -> None:
    parser = policy_run_parser("Flow-GRPO")
    parser.add_argument("--prompts-per-step", type=int, default=GRPOConfig.prompts_per_step)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--lr", type=float, default=GRPOConfig.learning_rate)
    parser.add_argument("--kl", type=float, default=GRPOSettings.kl)
    parser.add_argument("--clip", type=float, default=GRPOSettings.clip)
    parser.add_argument("--noise", type=float, default=SDESettings.a,
                        help="the SDE's noise level a (sde.noise_level)")
    parser.add_argument("--sde-steps", type=int, default=SDESettings.steps,
                        help="SDE steps per AR step")
    parser.add_argument("--draws", type=int, default=SDESettings.draws,
                        help="average each step's mean over this many noise draws, as "
                             "generation does with head_draws (needs --sde-steps 1)")
    parser.add_argument("--updates-per-step", type=int, default=GRPOConfig.updates_per_step)
    parser.add_argument("--checkpoint-every", type=int, default=GRPOConfig.checkpoint_every)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = GRPOConfig(steps=args.steps, prompts_per_step=args.prompts_per_step,
                        learning_rate=args.lr, updates_per_step=args.updates_per_step,
                        checkpoint_every=args.checkpoint_every,
                        sampler=SDESettings(steps=args.sde_steps, a=args.noise,
                                            draws=args.draws),
                        objective=GRPOSettings(clip=args.clip, kl=args.kl),
                        rollouts=RolloutSettings(group=args.group))
    GRPORun(args.init, args.out, config).train()


if __name__ == "__main__":
    main()
