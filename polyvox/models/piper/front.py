"""The Piper front: phoneme ids -> latent z, seeded per request.

The VITS front (text encoder, stochastic duration predictor, prior sampling, flow) runs
in onnxruntime. The graph is cut where the latent noise enters, because that noise has
one column per output frame and the number of frames is only known after the duration
predictor has run:

    stage 1 (durations):  ids, scales, duration_noise [1, 2, T_ids] -> durations, cut tensors
    stage 2 (latents):    cut tensors, latent_noise [1, C, T_frames] -> z [1, C, T_frames]

Both noises come from one torch.Generator, drawn in that order, so a seed fixes the
output whatever else runs in the process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnxruntime  # type: ignore[import-untyped]
import torch

from polyvox.models.piper.onnx_graph import (
    DURATION_NOISE,
    LATENT_NOISE,
    GraphSurgeryError,
    VitsGraph,
    noise_dependent_split,
    subgraph,
)

FRONT_INPUTS = ("input", "input_lengths", "scales", DURATION_NOISE)


@dataclass(frozen=True)
class FrontOutput:
    """What the front produces for one sentence."""

    latents: torch.Tensor  # z [C, T_frames] float32
    durations: torch.Tensor  # [T_ids] int64, frames per phoneme id (sums to T_frames)


def make_generator(seed_or_generator: int | torch.Generator) -> torch.Generator:
    """A CPU generator: an int seeds a fresh one, a generator is used as is."""
    if isinstance(seed_or_generator, torch.Generator):
        return seed_or_generator
    return torch.Generator().manual_seed(int(seed_or_generator))


def draw_duration_noise(num_ids: int, generator: torch.Generator) -> torch.Tensor:
    """The duration predictor's noise for one sentence: [1, 2, T_ids] (VITS layout)."""
    return torch.randn(1, 2, num_ids, generator=generator)


def draw_latent_noise(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """The prior's noise, shaped like the expanded prior mean: [1, C, T_frames]."""
    return torch.randn(shape, generator=generator)


class PiperFront:
    """onnxruntime sessions over the two stages of the cut front graph."""

    def __init__(self, vits: VitsGraph, num_threads: int | None = None) -> None:
        graph_inputs = {i.name for i in vits.model.graph.input}
        if "sid" in graph_inputs:
            raise GraphSurgeryError(
                "Multi-speaker Piper voices (graph input 'sid') are not supported yet."
            )
        cut, direct = noise_dependent_split(vits)
        self._cut = [name for name in cut if name != vits.latent_noise_template]
        stage1_outputs = [vits.durations, vits.latent_noise_template, *self._cut]
        stage2_inputs = [*direct, vits.latent_noise_template, *self._cut, LATENT_NOISE]
        options = onnxruntime.SessionOptions()
        if num_threads is not None:
            options.intra_op_num_threads = num_threads
        # NOTE: idle onnxruntime workers otherwise spin for a while after each run,
        # taking the cores the PyTorch decoder needs next.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers = ["CPUExecutionProvider"]
        self._stage1 = onnxruntime.InferenceSession(
            subgraph(vits, FRONT_INPUTS, stage1_outputs).SerializeToString(),
            sess_options=options,
            providers=providers,
        )
        self._stage2 = onnxruntime.InferenceSession(
            subgraph(vits, stage2_inputs, [vits.latent]).SerializeToString(),
            sess_options=options,
            providers=providers,
        )
        self._stage1_outputs = stage1_outputs
        self._direct = direct
        self._template = vits.latent_noise_template

    def __call__(
        self,
        phoneme_ids: list[int],
        noise_scale: float,
        length_scale: float,
        noise_w: float,
        seed: int | torch.Generator,
    ) -> FrontOutput:
        """One sentence's phoneme ids -> z [C, T_frames], with noise drawn from `seed`."""
        if not phoneme_ids:
            raise ValueError("phoneme_ids is empty: nothing to synthesize.")
        generator = make_generator(seed)
        inputs = {
            "input": np.asarray([phoneme_ids], dtype=np.int64),  # [1, T_ids]
            "input_lengths": np.asarray([len(phoneme_ids)], dtype=np.int64),  # [1]
            "scales": np.asarray([noise_scale, length_scale, noise_w], dtype=np.float32),
            DURATION_NOISE: draw_duration_noise(len(phoneme_ids), generator).numpy(),
        }
        stage1 = dict(zip(self._stage1_outputs, self._stage1.run(self._stage1_outputs, inputs)))
        template = stage1[self._template]  # [1, C, T_frames]
        latent_noise = draw_latent_noise(template.shape, generator)
        feed = {name: inputs[name] for name in self._direct}
        feed.update({name: stage1[name] for name in (self._template, *self._cut)})
        feed[LATENT_NOISE] = latent_noise.numpy()
        (z,) = self._stage2.run(None, feed)  # [1, C, T_frames]
        durations = stage1[self._stage1_outputs[0]].reshape(-1)  # [T_ids]
        return FrontOutput(
            latents=torch.from_numpy(z[0]).float(),
            durations=torch.from_numpy(durations).long(),
        )
