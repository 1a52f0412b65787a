"""The flow head's sampler as a stochastic process with the ODE's marginals, for Flow-GRPO
(issue 25; arXiv 2505.05470): its transitions are Gaussian, so a rollout's log-probability
under the policy, and the ratio to the one it was sampled under, are exact.

Convention (pocket-tts, the student's head): t = 0 is noise, t = 1 the latent,
x_t = t x1 + (1 - t) eps, and the head predicts v(x, t) = E[x1 - eps | x_t = x]. Then
E[eps | x_t = x] = x - t v, and the score is grad log p_t(x) = -(x - t v) / (1 - t).

For any sigma_t, dx = [v + sigma_t^2 / 2 * score] dt + sigma_t dW has the marginals of
the ODE dx = v dt (the Fokker-Planck terms of the noise and of the score correction
cancel). Euler-Maruyama over steps t_k = k / K gives Gaussian transitions

    x_{k+1} ~ N(x_k + h [v - sigma^2 / (2 (1 - t)) (x - t v)], sigma^2 h I)

with sigma_t = a * sqrt((1 - t) / (t + h)): large near the noise end (where the
correction is mild), vanishing at the data end. `a` = 0 is the plain Euler ODE sampler.

With `draws` > 1 (one step only) the transition's mean is the average of that mean over
the noises the student's generation averages (heads.draw_noises: x0, -x0, ...), so at
a = 0 the sample is exactly what the engine emits (heads.sample with head draws), and
a > 0 adds Gaussian exploration of std a around it: a policy whose mean is the shipped
sampler (docs/posttrain.md, "The Flow-GRPO runs on joe-ar v3").
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from polyvox.models.pocket.heads import check_draws, draw_noises

Velocity = Callable[[torch.Tensor, float], torch.Tensor]  # (x [B, D], t) -> v [B, D]


def noise_level(t: float, h: float, a: float) -> float:
    return a * math.sqrt((1 - t) / (t + h))


def transition(velocity: Velocity, x: torch.Tensor, t: float, h: float, a: float,
               draws: int = 1) -> tuple[torch.Tensor, float]:
    """The mean of the next state and the transition's standard deviation; with `draws`,
    the mean averaged over x's draws (the velocity sees B x draws rows, row-major)."""
    rows, dim = x.shape
    if draws > 1:
        x = draw_noises(x, draws).reshape(rows * draws, dim)
    v = velocity(x, t)
    sigma = noise_level(t, h, a)
    mean = x + h * (v - sigma**2 / (2 * (1 - t)) * (x - t * v))
    if draws > 1:
        mean = mean.reshape(rows, draws, dim).mean(1)
    return mean, sigma * math.sqrt(h)


def check_sampler(steps: int, draws: int) -> None:
    """ValueError unless the draws are the head's (1 or even) and, if several, one step."""
    check_draws(draws)
    if draws > 1 and steps != 1:
        raise ValueError(f"averaged draws need one sampler step, not {steps}")


def sample(velocity: Velocity, x0: torch.Tensor, steps: int, a: float,
           generator: torch.Generator | None = None, draws: int = 1) -> list[torch.Tensor]:
    """A trajectory [x0, x1, ..., x_K] from noise `x0`; x_K is the sample."""
    check_sampler(steps, draws)
    h, states = 1.0 / steps, [x0]
    for k in range(steps):
        mean, std = transition(velocity, states[-1], k * h, h, a, draws)
        noise = torch.randn(mean.shape, generator=generator) if std > 0 else 0.0
        states.append(mean + std * noise)
    return states


def transition_terms(velocity: Velocity, states: list[torch.Tensor], a: float,
                     draws: int = 1) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """Per row and step, the log-density of each transition [B, K], the transitions'
    means [B, K, D] and their standard deviations (K floats). Needs a > 0."""
    steps = len(states) - 1
    check_sampler(steps, draws)
    h = 1.0 / steps
    log_probs, means, stds = [], [], []
    for k in range(steps):
        mean, std = transition(velocity, states[k], k * h, h, a, draws)
        z = (states[k + 1] - mean) / std
        log_probs.append(-0.5 * (z**2).sum(dim=-1)
                         - z.shape[-1] * (math.log(std) + 0.5 * math.log(2 * math.pi)))
        means.append(mean)
        stds.append(std)
    return torch.stack(log_probs, dim=1), torch.stack(means, dim=1), stds


def log_prob(velocity: Velocity, states: list[torch.Tensor], a: float, draws: int = 1
             ) -> torch.Tensor:
    """Per row, the log-density of the trajectory's transitions under `velocity` [B]
    (differentiable through it: the policy's term of the GRPO ratio). Needs a > 0."""
    return transition_terms(velocity, states, a, draws)[0].sum(dim=1)
