"""Retiming a pointer student's runs (polyvox.models.retime): the plain reference against
runs worked out by hand, the streaming retimer against the reference, and the pace the
teacher's run lengths make. Resampling z: the reference's time map by hand, the streaming
stage against the reference through a local stand-in for the teacher's flow."""

from __future__ import annotations

import random

import pytest
import torch

from polyvox.models.retime import (
    Retimer,
    Retiming,
    ZResampler,
    ZResampling,
    resample_z_latents,
    retime_latents,
)

CHANNELS = 3


def _frames(lengths: list[int], seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs of the given lengths, one random frame per run: (frames [T, C], run frames)."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randn(len(lengths), CHANNELS, generator=generator)
    return ids.repeat_interleave(torch.tensor(lengths), 0), ids


def _runs(frames: torch.Tensor) -> tuple[list[int], torch.Tensor]:
    """The runs of equal frames: their lengths and frames."""
    lengths, firsts = [], []
    for index, frame in enumerate(frames):
        if index and torch.equal(frame, frames[index - 1]):
            lengths[-1] += 1
        else:
            lengths.append(1)
            firsts.append(frame)
    return lengths, torch.stack(firsts)


def test_runs_end_where_the_rounded_sums_of_scaled_powers_do() -> None:
    frames, ids = _frames([4, 1, 9, 2])
    retiming = Retiming(scale=0.5, exponent=1.0, group=1, channels=CHANNELS)
    lengths, out_ids = _runs(retime_latents(frames, retiming))
    # ends: round(2) = 2, round(2.5) = 2 -> at least one frame: 3, round(7) = 7, round(8) = 8
    assert lengths == [2, 1, 4, 1]
    assert torch.equal(out_ids, ids)  # every id is still spoken, in order
    retiming = Retiming(scale=1.0, exponent=0.5, group=1, channels=CHANNELS)
    # sqrt(4) = 2, + 1 = 3, + 3 = 6, + sqrt(2) = 7.41 -> 7: the long runs give up the most
    assert _runs(retime_latents(frames, retiming))[0] == [2, 1, 3, 1]


def test_the_last_latent_is_completed_with_its_last_frame() -> None:
    frames, ids = _frames([3, 2, 2])  # 7 frames
    retiming = Retiming(scale=1.0, exponent=1.0, group=4, channels=CHANNELS)
    out = retime_latents(frames.reshape(-1, CHANNELS)[:7], retiming)
    assert out.shape == (2, 4 * CHANNELS)
    lengths, out_ids = _runs(out.reshape(-1, CHANNELS))
    assert lengths == [3, 2, 3] and torch.equal(out_ids, ids)


@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("speed", [0.75, 1.25, 1.5, 2.0])
def test_streamed_retiming_equals_the_whole_clause_at_once(group: int, speed: float) -> None:
    """Latents pushed one by one (runs spanning latents, an id coming back after another)
    give what the reference gives for the whole clause, and hold back little."""
    rng = random.Random(int(speed * 100) + group)
    retiming = Retiming.for_speed(speed, 0.7, [3, 4, 2, 1, 0, 0.5], group, CHANNELS)
    retimer = Retimer(retiming)
    for clause in range(3):  # one retimer serves a request's clauses one after another
        lengths = [rng.choice([1, 1, 2, 2, 2, 3, 5, 9]) for _ in range(rng.randint(1, 30))]
        frames, _ = _frames(lengths, seed=clause)
        frames = torch.cat([frames, frames[-1:].repeat(-len(frames) % group, 1)])
        latents = frames.reshape(-1, group * CHANNELS)
        streamed = []
        for latent in latents:
            streamed += retimer.push(latent)
            # what is held: the run in progress (the last one padded by up to a latent)
            # and less than a latent of retimed frames
            assert retimer.held_frames < max(lengths) + 2 * group
        streamed += retimer.finish()
        assert retimer.held_frames == 0
        assert torch.equal(torch.stack(streamed), retime_latents(latents, retiming))


def test_the_teacher_s_runs_come_out_one_over_speed_as_long() -> None:
    """Run lengths drawn from the counts the scale was fitted on: a clause of ~100 runs
    lasts 1 / speed of its frames, within a few percent (rounding and the draw)."""
    counts = [2836.5, 4413.3, 1860.5, 538.6, 199.6, 67.8, 28.6, 16.1]
    rng = random.Random(0)
    for speed in (1.25, 1.5, 2.0):
        retiming = Retiming.for_speed(speed, 0.7, counts, 1, CHANNELS)
        ratios = []
        for seed in range(20):
            lengths = rng.choices(range(1, len(counts) + 1), weights=counts, k=100)
            frames, _ = _frames(lengths, seed)
            ratios.append(len(retime_latents(frames, retiming)) / len(frames))
        ratios.sort()
        assert abs(ratios[10] * speed - 1) < 0.04, (speed, ratios)


def test_a_retiming_must_make_sense() -> None:
    with pytest.raises(ValueError, match="speed must be positive"):
        Retiming.for_speed(0.0, 0.7, [1.0], 4, CHANNELS)
    with pytest.raises(ValueError, match="no run"):
        Retiming.for_speed(1.5, 0.7, [0.0, 0.0], 4, CHANNELS)
    with pytest.raises(ValueError, match="not a retiming"):
        Retiming(scale=1.0, exponent=0.0, group=4, channels=CHANNELS)


def _local_flow(context: int, seed: int = 0):
    """A stand-in for the teacher's flow with its edge rule: each output frame depends on
    the input frames within `context` either side, zero-padded at the window's ends."""
    weight = torch.randn(CHANNELS, CHANNELS, 2 * context + 1,
                         generator=torch.Generator().manual_seed(seed)) / (2 * context + 1)

    def flow(prior: torch.Tensor) -> torch.Tensor:  # [C, T] -> [C, T]
        return torch.tanh(torch.nn.functional.conv1d(prior[None].double(), weight.double(),
                                                     padding=context)[0]).float() + prior

    return flow


def _z_resampling(speed: float, group: int, context: int = 5) -> ZResampling:
    return ZResampling(speed, group, CHANNELS, lambda latent: latent.reshape(-1, CHANNELS),
                       _local_flow(context), context=context, first_block=3, block=7)


def test_resampled_z_reads_the_flow_s_output_at_speed_times_the_output_time() -> None:
    """Output frame j reads z at source time (j + 0.5) x speed - 0.5, linearly between the
    frames either side, clamped to the clause; a clause of T frames gives round(T / speed)."""
    ramp = torch.arange(10.0)[None].repeat(CHANNELS, 1)  # z [C, T]: frame t holds t
    resampling = ZResampling(1.5, 1, CHANNELS, lambda latent: latent.reshape(-1, CHANNELS),
                             lambda prior: prior)  # the identity as the flow
    out = resample_z_latents(ramp.T, resampling)[:, 0]
    assert out.tolist() == pytest.approx([0.25, 1.75, 3.25, 4.75, 6.25, 7.75, 9.0])
    slow = ZResampling(0.5, 1, CHANNELS, resampling.frames_of, resampling.flow)
    assert resample_z_latents(ramp.T[:3], slow)[:, 0].tolist() == pytest.approx(
        [0.0, 0.25, 0.75, 1.25, 1.75, 2.0])  # clamped at both ends, 6 frames of 3
    # completed to whole latents with copies of the last frame
    grouped = ZResampling(1.5, 4, CHANNELS, resampling.frames_of, resampling.flow)
    latents = resample_z_latents(ramp.T.reshape(-1, 2 * CHANNELS), grouped)
    assert latents.reshape(-1, CHANNELS)[:, 0].tolist() == pytest.approx(
        out.tolist() + [9.0])


@pytest.mark.parametrize("group", [1, 4])
@pytest.mark.parametrize("speed", [0.75, 1.25, 1.5, 2.0, 3.0])
def test_streamed_z_resampling_equals_the_whole_clause_at_once(group: int,
                                                               speed: float) -> None:
    """Latents pushed one by one give what the flow and resampling of the whole clause
    give (the flow's windows keep `context` frames either side), and a frame comes out
    within the flow's context, a block and a latent of its source."""
    rng = random.Random(int(speed * 100) + group)
    resampling = _z_resampling(speed, group)
    stage = resampling.stage()
    assert isinstance(stage, ZResampler) and stage.decode_options == {"z": True}
    for clause in range(3):  # one stage serves a request's clauses one after another
        count = rng.randint(1, 40)
        latents = torch.randn(count, group * CHANNELS,
                              generator=torch.Generator().manual_seed(clause))
        streamed, pushed = [], 0
        for latent in latents:
            streamed += stage.push(latent)
            pushed += group
            lag = pushed - len(streamed) * group * speed
            assert lag <= resampling.context + resampling.block + 2 * group * speed + 2
            # the source frames kept: the flow's context either side and a block at most
            assert stage.held_frames <= 2 * resampling.context + resampling.block + group
        streamed += stage.finish()
        torch.testing.assert_close(torch.stack(streamed),
                                   resample_z_latents(latents, resampling),
                                   atol=1e-6, rtol=0)


def test_a_z_resampling_must_make_sense() -> None:
    with pytest.raises(ValueError, match="not a z resampling"):
        _z_resampling(0.0, 4)
