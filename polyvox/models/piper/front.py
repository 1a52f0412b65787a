"""The Piper front: phoneme ids -> latent z, seeded per request.

The VITS front (text encoder, stochastic duration predictor, prior sampling, flow) runs
in onnxruntime. The graph is cut where the latent noise enters, because that noise has
one column per output frame and the number of frames is only known after the duration
predictor has run:

    stage 1 (durations):  ids, scales, duration_noise [B, 2, T_ids] -> durations, cut tensors
    stage 2 (latents):    cut tensors, latent_noise [1, C, T_frames] -> z [1, C, T_frames]

Both noises come from the sentence's torch.Generator, drawn in that order, so a seed fixes
the output whatever else runs in the process. Stage 1 runs many sentences at once (its
cost is mostly per call); stage 2 is compute-bound per frame and runs one sentence at a
time on that sentence's own frames (padding would only add work), whole (`run`) or on a
window of them with 32 frames of context either side (`run_flow`).
"""

from __future__ import annotations

from collections import defaultdict
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
# Stage 1 pads a batch's ids to its longest sentence; a sentence longer than this many
# times the batch's shortest starts another batch (padding would cost more than a call).
MAX_PADDING_RATIO = 1.5
# Frames the flow sees either side of a window (`run_flow`). A z frame depends on the 32
# frames either side of it (4 coupling layers x 4 convs of kernel 5, measured), so a
# window with this context differs from the whole sentence's z only by rounding (6e-7).
FLOW_CONTEXT = 32


@dataclass(frozen=True)
class Scales:
    """VITS inference scales for one request."""

    noise_scale: float  # latent (prior) noise
    length_scale: float  # phoneme duration multiplier (> 1 is slower)
    noise_w: float  # duration noise


@dataclass(frozen=True)
class Sentence:
    """One sentence for the front: its phoneme ids, how to say it, whose noise to draw."""

    phoneme_ids: list[int]
    scales: Scales
    generator: torch.Generator


@dataclass(frozen=True)
class Stage1Output:
    """One sentence after stage 1: everything the flow (stage 2) reads, noise included."""

    feed: dict[str, np.ndarray]  # stage 2's inputs cut to the sentence: [1, ..., T_frames]
    durations: torch.Tensor  # [T_ids] int64, frames per phoneme id (sums to T_frames)
    num_frames: int  # T_frames


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
        # Stage 2's inputs with one column per frame (the scalar noise scale has none).
        self._per_frame = {self._template, *self._cut, LATENT_NOISE}
        self._probe: Stage1Output | None = None

    def __call__(
        self,
        phoneme_ids: list[int],
        noise_scale: float,
        length_scale: float,
        noise_w: float,
        seed: int | torch.Generator,
    ) -> FrontOutput:
        """One sentence's phoneme ids -> z [C, T_frames], with noise drawn from `seed`."""
        scales = Scales(noise_scale, length_scale, noise_w)
        (output,) = self.run([Sentence(phoneme_ids, scales, make_generator(seed))])
        return output

    def run(self, sentences: list[Sentence]) -> list[FrontOutput]:
        """Many sentences -> z [C, T_frames] each, in order; stage 1 batched.

        Each sentence's output equals what a call with it alone would give (to ~1e-5
        relative: onnxruntime's kernels round differently at batch > 1), and every
        generator draws what one-at-a-time calls in list order would have drawn.
        """
        return [FrontOutput(latents=self.run_flow(output), durations=output.durations)
                for output in self.run_stage1(sentences)]

    def run_stage1(self, sentences: list[Sentence]) -> list[Stage1Output]:
        """Stage 1 of many sentences (batched) and their latent noise; no flow yet.

        Every generator has drawn all it will for these sentences when this returns:
        `run_flow` only slices what was drawn here.
        """
        for sentence in sentences:
            if not sentence.phoneme_ids:
                raise ValueError("phoneme_ids is empty: nothing to synthesize.")
        outputs: list[Stage1Output | None] = [None] * len(sentences)
        # NOTE: a generator's next duration noise comes after its last latent noise, whose
        # size stage 1 decides: a batch holds at most one sentence per generator, and a
        # generator's later sentences go into later rounds.
        for indices in _draw_rounds(sentences):
            for batch in _batches(sentences, indices):
                batch_outputs = self._run_stage1_batch([sentences[i] for i in batch])
                for index, output in zip(batch, batch_outputs, strict=True):
                    outputs[index] = output
        return [output for output in outputs if output is not None]

    def run_flow(self, sentence: Stage1Output, start: int = 0,
                 stop: int | None = None) -> torch.Tensor:
        """z [C, stop - start] of one sentence's frames [start, stop), from stage 1's output.

        The flow sees `FLOW_CONTEXT` frames either side of the window (fewer at the
        sentence's ends); the whole sentence (the default) is exactly `run`'s z.
        """
        stop = sentence.num_frames if stop is None else stop
        context = FLOW_CONTEXT
        if not 0 <= start < stop <= sentence.num_frames:
            raise ValueError(f"Frames [{start}, {stop}) are not within the sentence's "
                             f"{sentence.num_frames}.")
        first = max(0, start - context)
        last = min(sentence.num_frames, stop + context)
        feed = sentence.feed
        if (first, last) != (0, sentence.num_frames):
            feed = {name: np.ascontiguousarray(value[..., first:last])
                    if name in self._per_frame and value.ndim else value
                    for name, value in feed.items()}
        (z,) = self._stage2.run(None, feed)  # [1, C, last - first]
        return torch.from_numpy(z[0, :, start - first: stop - first]).float()

    def prior_mean(self, sentence: Stage1Output) -> torch.Tensor:
        """The prior's mean m_p expanded to frames, [C, T_frames] float32: one vector per
        phoneme id, repeated for its duration. At noise scale 0 the flow maps exactly this
        to z (`flow_from_prior`)."""
        return torch.from_numpy(sentence.feed[self._template][0]).float()

    def flow_from_prior(self, prior: torch.Tensor) -> torch.Tensor:
        """The noise-free flow: frames of the prior's mean [C, T] (or rows of them,
        [B, C, T], in one call) -> z of the same shape, float32.

        Stage 2 adds noise x exp(log-variance) x noise scale to its prior input before the
        flow; with the noise scale at 0 only the mean and the mask matter, so the other
        per-frame inputs are fed as ones. Edges are zero-padded as for a whole sentence:
        a window equals the sentence's z only `FLOW_CONTEXT` frames in from a cut edge.
        """
        if prior.dim() not in (2, 3) or prior.shape[-1] == 0:
            raise ValueError("prior must be [C, T] or [B, C, T] with T >= 1, "
                             f"got {tuple(prior.shape)}.")
        rows = prior if prior.dim() == 3 else prior[None]
        batch, _, frames = rows.shape
        probe = self._noise_free_probe()
        feed = {name: probe.feed[name] for name in self._direct}
        feed[self._template] = rows.float().cpu().numpy()
        feed[LATENT_NOISE] = np.zeros(rows.shape, dtype=np.float32)
        for name in self._cut:
            value = probe.feed[name]
            feed[name] = (value if value.ndim == 0  # the noise scale, 0 in the probe
                          else np.ones((batch, *value.shape[1:-1], frames), dtype=value.dtype))
        (z,) = self._stage2.run(None, feed)
        z = torch.from_numpy(z).float()
        return z if prior.dim() == 3 else z[0]

    def _noise_free_probe(self) -> Stage1Output:
        """Stage 1 of a three-id sentence at noise 0: stage 2's inputs other than the prior
        mean, in shape and (for scalars) value, for `flow_from_prior`."""
        if self._probe is None:
            generator = torch.Generator().manual_seed(0)
            (self._probe,) = self.run_stage1([Sentence([1, 0, 2], Scales(0.0, 1.0, 0.0),
                                                        generator)])
            noise_scales = [v for n, v in self._probe.feed.items()
                            if n in self._cut and v.ndim == 0]
            if len(noise_scales) != 1 or float(noise_scales[0]) != 0.0:
                raise GraphSurgeryError("Stage 2 has no single scalar noise-scale input; "
                                        "flow_from_prior cannot feed it.")
        return self._probe

    def _run_stage1_batch(self, sentences: list[Sentence]) -> list[Stage1Output]:
        """Sentences with equal scales and distinct generators: one stage-1 call."""
        scales = sentences[0].scales
        shared = np.asarray([scales.noise_scale, scales.length_scale, scales.noise_w],
                            dtype=np.float32)
        # What each sentence alone would feed: ids [1, T_ids], noise [1, 2, T_ids].
        rows = [{
            "input": np.asarray([s.phoneme_ids], dtype=np.int64),
            "input_lengths": np.asarray([len(s.phoneme_ids)], dtype=np.int64),
            "scales": shared,
            DURATION_NOISE: draw_duration_noise(len(s.phoneme_ids), s.generator).numpy(),
        } for s in sentences]
        inputs = rows[0] if len(rows) == 1 else _padded(rows)
        stage1 = dict(zip(self._stage1_outputs, self._stage1.run(self._stage1_outputs, inputs)))
        durations = stage1[self._stage1_outputs[0]]  # [B, 1, T_ids], 0 past a row's ids
        template = stage1[self._template]  # [B, C, T_frames] of the longest sentence
        outputs = []
        for row, sentence in enumerate(sentences):
            num_ids = len(sentence.phoneme_ids)
            frames = max(1, int(durations[row].sum()))  # VITS makes at least one frame
            if frames > template.shape[-1]:
                raise GraphSurgeryError(f"Stage 1 gave {frames} frames of durations but "
                                        f"latents of {template.shape[-1]} frames.")
            feed = {name: rows[row][name] for name in self._direct}
            feed.update({name: _frames_of_row(stage1[name], row, frames, len(rows))
                         for name in (self._template, *self._cut)})
            shape = (1, *template.shape[1:-1], frames)  # [1, C, T_frames]
            feed[LATENT_NOISE] = draw_latent_noise(shape, sentence.generator).numpy()
            outputs.append(Stage1Output(
                feed=feed,
                durations=torch.from_numpy(durations[row].reshape(-1)[:num_ids]).long(),
                num_frames=frames,
            ))
        return outputs


def _padded(rows: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Single-sentence stage-1 inputs as one batch, ids and noise zero-padded to the longest.

    NOTE: the graph masks every position past a row's `input_lengths` (attention, convs,
    durations 0), so padding changes no row's result beyond rounding.
    """
    lengths = [int(row["input_lengths"][0]) for row in rows]
    width = max(lengths)
    ids = np.zeros((len(rows), width), dtype=np.int64)  # [B, T_ids]
    noise = np.zeros((len(rows), 2, width), dtype=np.float32)  # [B, 2, T_ids]
    for index, (row, length) in enumerate(zip(rows, lengths)):
        ids[index, :length] = row["input"][0]
        noise[index, :, :length] = row[DURATION_NOISE][0]
    return {"input": ids, "input_lengths": np.asarray(lengths, dtype=np.int64),
            "scales": rows[0]["scales"], DURATION_NOISE: noise}


def _frames_of_row(value: np.ndarray, row: int, frames: int, batch_size: int) -> np.ndarray:
    """One sentence's part of a stage-1 tensor that stage 2 reads: [B, ..., T_max] ->
    [1, ..., frames]. Scalars (the noise scale) are shared; a batch of one is passed as is."""
    if batch_size == 1 or value.ndim == 0:
        return value
    if value.shape[0] != batch_size:
        raise GraphSurgeryError(
            f"A tensor stage 2 reads has shape {value.shape}: expected the batch first.")
    return np.ascontiguousarray(value[row: row + 1, ..., :frames])


def _draw_rounds(sentences: list[Sentence]) -> list[list[int]]:
    """Indices by draw round: round r holds every generator's r-th sentence, in order."""
    rounds: list[list[int]] = []
    drawn: dict[int, int] = defaultdict(int)
    for index, sentence in enumerate(sentences):
        turn = drawn[id(sentence.generator)]
        drawn[id(sentence.generator)] += 1
        if turn == len(rounds):
            rounds.append([])
        rounds[turn].append(index)
    return rounds


def _batches(sentences: list[Sentence], indices: list[int]) -> list[list[int]]:
    """One round's sentences in stage-1 batches: equal scales (one `scales` input per
    call) and ids of similar length (padding costs about what real ids cost)."""
    groups: dict[Scales, list[int]] = defaultdict(list)
    for index in indices:
        groups[sentences[index].scales].append(index)
    batches: list[list[int]] = []
    for group in groups.values():
        group.sort(key=lambda i: len(sentences[i].phoneme_ids))
        shortest = 0
        for position, index in enumerate(group):
            length = len(sentences[index].phoneme_ids)
            if position == 0 or length > MAX_PADDING_RATIO * shortest:
                batches.append([])
                shortest = length
            batches[-1].append(index)
    return batches
