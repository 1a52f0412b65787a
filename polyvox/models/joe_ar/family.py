"""The distilled student behind the engine's stage protocol (polyvox.models.base).

    clause text ─► teacher's phonemizer ─► phoneme ids ─► prefill (paged KV)
    step: FlowLM + flow-matching head ─► one grouped latent (G teacher frames) + EOS logit
          (a pointer student, the shipped one: FlowLM + pointer head ─► which of the G
          frames start the next id ─► copies of the teacher's encodings of those ids)
    decode: grouped latents ─► denormalize, ungroup ─► teacher latents [192, N * G]
            ─► (teacher_latent "prior": the teacher's flow at noise 0) ─► z
            ─► teacher's HiFi-GAN in windows (history + lookahead, as PiperFamily)

The engine counts latents in AR steps, so history and lookahead are whole steps: HiFi-GAN
reaches 10 frames either side, and the flow 32 more (a z frame depends on the prior
within 32 frames), so 11 steps of 4 frames for a "prior" student, 3 for a "z" one. Each
clause is its own utterance (fresh decoder state and, by default, fresh KV context), as
for the teacher, whose every training utterance starts and ends in silence. Chained
(`EngineConfig(chaining="chained")`), a clause is prefilled after at most
`context_window` = 128 of the request's earlier positions (less than one sentence's ids
and steps), as in training, where a clause follows a random tail of at most one clause;
the engine's usual 384 reaches back further than the student ever saw. At 128, chained
paragraphs of read prose score as well as fresh contexts, but after a question a short
spelled clause is sometimes replaced by the question again (5 of 30 probes, none with
fresh contexts), so chaining is not the default (docs/posttrain.md, session 22). The
repeat comes from the earlier clause's ids in the context: `chaining="audio"` drops them,
and a student trained for it (`polyvox train distill --prefix-ids 15`) did not repeat
(session 23). The shipped weights (v5, session 24) were trained for it and never repeat
with it, but chained that way their paragraphs were a little less intelligible than
with fresh contexts (test split 0.052-0.054 against 0.045-0.046), so `pocket` stays the
default; `--chaining audio` asks for it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from polyvox.models.base import AudioFormat, ClausePlan, FamilyTraits, KVSpec
from polyvox.models.layers.attention import ContiguousKV, KVStore
from polyvox.models.piper.flow import FlowWindow, PiperFlow
from polyvox.models.piper.front import FLOW_CONTEXT, Scales, Sentence
from polyvox.models.pocket.flow_lm import FlowLM, FlowLMStages
from polyvox.models.pocket.weights import random_init
from polyvox.models.retime import Retiming, ZResampling, resample_z_latents, retime_latents
from polyvox.text.clauses import split_text
from polyvox.models.joe_ar.network import (
    DEFAULT_CONFIG,
    SPEED_RANGE,
    StudentConfig,
    build_student,
    id_features,
    load_config,
    load_student,
    PointerHead,
    pointer_step,
    ungroup_frames,
)

if TYPE_CHECKING:
    from polyvox.models.piper.front import PiperFront
    from polyvox.models.piper.hifigan import HiFiGan
    from polyvox.models.piper.phonemes import Phonemizer

logger = logging.getLogger(__name__)
DECODER_CONTEXT_FRAMES = 10  # HiFi-GAN's reach either side (docs/piper.md)
MIN_STEPS_BEFORE_EOS = 6  # the engine's rule (polyvox.engine.engine)
MAX_FRAMES_PER_ID = 4  # length cap: the teacher averages ~2.2 frames per id
PADDING_SECONDS = 1.0
# Own positions a clause is chained after, when chained (the module docstring): no more
# than training's prefixes, the tail of at most one clause.
CONTEXT_WINDOW = 128


@dataclass(frozen=True)
class StudentParams:
    """Per-request settings. None means the config's default."""

    seed: int = 0
    temperature: float | None = None
    eos_threshold: float | None = None
    frames_after_eos: int | None = None
    sampler_steps: int = 1
    speed: float = 1.0  # > 1 talks faster; only a student with speed_input reads it

    def __post_init__(self) -> None:
        if self.temperature is not None and not 0 <= self.temperature <= 10:
            raise ValueError("temperature must be between 0 and 10")
        if self.sampler_steps < 1:
            raise ValueError("sampler_steps must be >= 1")


@dataclass(frozen=True)
class _EmptyVoice:
    k: torch.Tensor
    v: torch.Tensor
    name: str = "default"

    @property
    def length(self) -> int:
        return int(self.k.shape[1])


class StudentFamily(FlowLMStages):
    """The engine's stage protocol for a distilled student (see the module docstring).
    Latents are counted in AR steps of `frames_per_step` teacher frames; so are
    its traits' decoder history and lookahead. Tokens are the teacher's phoneme ids."""

    #: Its tokens are phoneme ids (~13 per word): clauses are capped much higher than
    #: the engine's default of 50 text pieces. Chunks are in AR steps (4 teacher frames,
    #: ~46 ms): each chunk pays for the decoder's context either side (the flow's 42
    #: frames, HiFi-GAN's 10) whatever its size, so no chunk is shorter than 8 steps
    #: (~370 ms), the first included (a shorter first one left 2 streams short of real
    #: time), and chunks grow long as the listener's buffer does (docs/perf-history.md,
    #: session 6).
    PREFERRED_SETTINGS = {"chaining": "pocket", "context_window": CONTEXT_WINDOW,
                          "max_clause_tokens": 350, "first_chunk_frames": 8,
                          "min_chunk_frames": 8, "chunk_frames": 8, "max_chunk_frames": 32}

    def __init__(self, config: StudentConfig, flow_lm: FlowLM, phonemizer: Phonemizer,
                 hifigan: HiFiGan, front: PiperFront | None = None,
                 is_random: bool = False, streamed_flow: PiperFlow | None = None) -> None:
        if config.teacher_latent == "prior" and front is None:
            raise ValueError("a student of the teacher's prior needs the teacher's front "
                             "(its flow) to decode")
        if config.text_features is not None and front is None:
            raise ValueError("a student that reads the teacher's text encoding needs the "
                             "teacher's front")
        # NOTE: `student`, not `config`: polyvox bench reads `family.config` as a PocketConfig.
        self.student, self.flow_lm = config, flow_lm.eval()
        self.phonemizer, self.hifigan, self.is_random = phonemizer, hifigan, is_random
        group, hop = config.frames_per_step, hifigan.hop_length
        self.frames_per_step, self.channels = group, config.latent_channels
        sample_rate = phonemizer.config.sample_rate
        self.audio = AudioFormat(sample_rate, sample_rate / (hop * group), hop * group)
        backbone = config.flow_lm.transformer
        self.kv_shape = (backbone.num_layers, backbone.kv_heads, backbone.head_dim)
        self.kv_spec = KVSpec(*self.kv_shape, dtype=torch.float32)
        self.latent_dim = config.latent_dim
        self.flow = front if config.teacher_latent == "prior" else None
        # the same flow in torch, computed as a stream (piper/flow.py); without it every
        # window runs the flow over its whole reach again, in onnxruntime
        self.streamed_flow = streamed_flow if self.flow is not None else None
        self.front = front
        context = DECODER_CONTEXT_FRAMES + (FLOW_CONTEXT if self.flow else 0)
        window = math.ceil(context / group)  # in AR steps, either side
        # Utterances start in silence, as the teacher's: no fade-in.
        self.traits = FamilyTraits(
            is_autoregressive=True, resets_decoder_per_clause=True, decoder_history=window,
            decoder_lookahead=window, preferred_settings=self.PREFERRED_SETTINGS,
            steps_read_clause=self.pointer_head is not None,
            clause_feature_width=int(getattr(flow_lm, "feature_width", 0)))

    @property
    def pointer_head(self) -> PointerHead | None:
        """A pointer student's head (StudentConfig.pointer_width), else None."""
        return getattr(self.flow_lm, "pointer_head", None)

    def lower_precision(self, dtype: torch.dtype) -> None:
        """`--precision bfloat16`: the student's linears, the teacher's HiFi-GAN and its
        streamed flow keep their weights in `dtype` and run in it (the onnxruntime flow, used
        without a streamed one, stays float32). On a CPU with AVX512-BF16 that is ~1.2x the
        audio per second at saturation; dev WER moves within what the judge resolves
        (docs/perf.md, session 39)."""
        from polyvox.models.layers.precision import lower_precision

        self.hifigan.lower_precision(dtype)
        lower_precision(self.flow_lm, dtype)
        if self.streamed_flow is not None:
            self.streamed_flow.lower_precision(dtype)

    @property
    def sample_rate(self) -> int:
        return self.audio.sample_rate

    def empty_voice(self) -> _EmptyVoice:
        empty = torch.zeros(self.kv_shape[0], 0, *self.kv_shape[1:])
        return _EmptyVoice(empty, empty.clone())

    # --- text ----------------------------------------------------------------------------

    def phoneme_ids(self, text: str) -> list[int]:
        """A clause's ids; espeak sentences are merged into one (inner EOS/BOS dropped)."""
        sentences = self.phonemizer.text_to_ids(text)
        ids: list[int] = []
        for index, sentence in enumerate(sentences):
            start = 2 if index else 0  # BOS PAD of the following sentences
            end = len(sentence) - 1 if index < len(sentences) - 1 else len(sentence)
            ids.extend(sentence[start:end])
        return ids

    def count_tokens(self, text: str) -> int:
        """Phoneme ids (~13 per word: phonemes, PADs, stress marks): the clause's KV size."""
        return len(self.phoneme_ids(text))

    def split_like_reference(self, text: str, max_tokens: int) -> list[str]:
        return split_text(text, self.count_tokens, max_tokens)

    def make_params(self, seed: int = 0, temperature: float | None = None,
                    speed: float = 1.0) -> StudentParams:
        if speed != 1.0 and not self.student.speed_input and self.retiming(speed) is None:
            raise ValueError(f"pocket/{self.student.name} cannot change speed; use speed 1.0")
        low, high = SPEED_RANGE
        if not low <= speed <= high:
            raise ValueError(f"pocket/{self.student.name} speaks speeds {low} to {high} "
                             f"(what it was trained on), not {speed}")
        return StudentParams(seed=seed, temperature=temperature, speed=speed)

    def plan_clause(self, text: str, params: StudentParams) -> ClausePlan:
        ids = self.phoneme_ids(text)
        if not ids:
            raise ValueError("the clause has nothing to speak")
        after = params.frames_after_eos
        after = self.student.frames_after_eos if after is None else after
        spoken, retiming = self._pace(params.speed)
        return ClausePlan(torch.tensor(ids, dtype=torch.long), after,
                          self.max_frames(len(ids), spoken),
                          self.text_features(ids, spoken), retiming)

    def _pace(self, speed: float) -> tuple[float, Retiming | ZResampling | None]:
        """The speed the student speaks a clause at, and how it is then retimed."""
        retiming = self.retiming(speed)
        return (1.0 if retiming else speed), retiming

    def retiming(self, speed: float) -> Retiming | ZResampling | None:
        """How a clause spoken at speed 1 is made `speed` (polyvox.models.retime): faster
        speech with its z resampled (the config's faster_in_z), else retimed where the
        config retimes that direction (retime_faster / retime_slower); None: the student
        speaks at `speed` itself (its pace input), as generated."""
        if speed == 1.0:
            return None
        if speed > 1 and self.student.faster_in_z:
            assert self.flow is not None  # the config asks for teacher_latent "prior"
            # the decoder reads that z with HiFi-GAN alone: its reach, not the flow's
            group = self.frames_per_step
            lookahead = math.ceil(DECODER_CONTEXT_FRAMES / group)
            # a clause's first flow call makes the z its first chunk reads (as the family
            # prefers chunks): output frames up to (first chunk + lookahead) x group
            first = (self.PREFERRED_SETTINGS["first_chunk_frames"] + lookahead) * group
            first_block = math.ceil((first - 0.5) * speed + 0.5) + 1
            return ZResampling(speed, group, self.channels, self._prior_frames,
                               self.flow.flow_from_prior, FLOW_CONTEXT,
                               first_block=first_block, decoder_lookahead=lookahead)
        exponent = self.student.retime_faster if speed > 1 else self.student.retime_slower
        if exponent is None:
            return None
        return Retiming.for_speed(speed, exponent, self.student.run_counts,
                                  self.frames_per_step, self.channels)

    def text_features(self, ids: list[int], speed: float = 1.0) -> torch.Tensor | None:
        """What the student reads per id beside the id (`text_features`): the teacher's
        prior mean of each id, [N, 192], from the teacher's stage 1 at noise 0, then (a
        student with `speed_input`) a column of log speed. Only the encoder's output is
        used; its durations are dropped (the student times itself)."""
        if self.student.text_features is None:
            return None
        assert self.front is not None
        generator = torch.Generator().manual_seed(0)  # noise 0: nothing is drawn from it
        (stage1,) = self.front.run_stage1([Sentence(ids, Scales(0.0, 1.0, 0.0), generator)])
        features = id_features(self.front.prior_mean(stage1).T, stage1.durations)
        if not self.student.speed_input:
            return features
        return torch.cat([features, features.new_full((len(ids), 1), math.log(speed))], 1)

    def eos_threshold(self, params: StudentParams) -> float:
        if params.eos_threshold is None:
            return self.student.default_eos_threshold
        return params.eos_threshold

    def sample_noise(self, generator: torch.Generator, params: StudentParams) -> torch.Tensor:
        temperature = params.temperature
        temperature = self.student.default_temperature if temperature is None else temperature
        return torch.empty(self.latent_dim).normal_(0.0, temperature**0.5, generator=generator)

    # --- stages ------------------------------------------------------------------------

    @torch.no_grad()
    def step_batch(self, latents: torch.Tensor, positions: torch.Tensor, kv: KVStore,
                   noise: torch.Tensor, sampler_steps: int,
                   clauses: tuple[torch.Tensor, torch.Tensor] | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """The flow head samples each step; a pointer student instead copies the teacher's
        encodings of the ids its pointer head moves to (network.pointer_step), reading
        each row's clause (`clauses`: the plan's features [B, N, F], counts [B]); it
        draws no noise, so its speech does not depend on the seed."""
        head = self.pointer_head
        if head is None:
            return super().step_batch(latents, positions, kv, noise, sampler_steps)
        if clauses is None:
            raise ValueError(f"pocket/{self.student.name} steps with each row's clause "
                             "features (traits.steps_read_clause)")
        features, counts = clauses
        hidden, eos_logits = self.flow_lm.step_hidden(latents, positions, kv)
        encodings = self.flow_lm.normalize_features(features)
        last_step = latents.reshape(len(latents), self.frames_per_step, self.channels)
        frames = pointer_step(head, hidden, last_step, encodings, counts)
        return frames.reshape(len(frames), -1), eos_logits

    def decoder_state_shapes(self) -> dict[str, tuple[int, ...]]:
        shapes = {"history": (self.channels, self.traits.decoder_history * self.frames_per_step)}
        flow = self.streamed_flow
        if flow is not None:  # _decode_streamed's
            lookahead = self.traits.decoder_lookahead * self.frames_per_step
            shapes["flow"] = (len(flow.couplings) - 1, self.channels, 2 * flow.reach)
            shapes["z"] = (self.channels, DECODER_CONTEXT_FRAMES + lookahead)
        return shapes

    def new_decoder_state(self, batch_size: int = 1) -> dict[str, torch.Tensor]:
        return {name: torch.zeros(batch_size, *shape)
                for name, shape in self.decoder_state_shapes().items()}

    def _prior_frames(self, latent: torch.Tensor) -> torch.Tensor:
        """One AR step's latent [D] -> the teacher frames it holds [G, C]."""
        return ungroup_frames(self.flow_lm.denormalize(latent)[None], self.channels)

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, state: dict[str, torch.Tensor],
               num_frames: int | None = None, history: int = 0, z: bool = False
               ) -> torch.Tensor:
        """latents [B, N + L, D]: N new steps then L lookahead steps; `history` steps of the
        slot's past are prepended. Returns PCM [B, N * samples_per_frame] (new only).
        `z`: the latents are z frames already (a clause stage resampled them: ZResampler),
        read by HiFi-GAN as they are; the slot's history then holds z too."""
        steps = latents.shape[1] if num_frames is None else num_frames
        group = self.frames_per_step
        frames = latents if z else self.flow_lm.denormalize(latents)
        frames = ungroup_frames(frames, self.channels).transpose(1, 2)
        if self.streamed_flow is not None and not z:  # the slot's history goes unused
            return self._decode_streamed(frames, state, steps * group, history)
        kept = state["history"].shape[2]
        past = state["history"][:, :, kept - history * group:] if history else frames[:, :, :0]
        window = torch.cat([past, frames], dim=2)  # [B, C, (h + N + L) * G]
        if self.flow is not None and not z:  # the prior -> z (onnxruntime, all rows at once)
            window = self.flow.flow_from_prior(window).to(frames.device)
        # HiFi-GAN reaches DECODER_CONTEXT_FRAMES either side: the wider window the flow
        # needed is cut down to that before the (costlier) vocoder.
        start = history * group  # the first new frame in the window
        first = max(0, start - DECODER_CONTEXT_FRAMES)
        last = min(window.shape[2], start + steps * group + DECODER_CONTEXT_FRAMES)
        state["history"] = torch.cat([state["history"], frames[:, :, : steps * group]],
                                     2)[:, :, -kept:]
        return self._vocode(window[:, :, first:last], start - first, steps * group)

    def _vocode(self, z: torch.Tensor, offset: int, count: int) -> torch.Tensor:
        """HiFi-GAN over z [B, C, T]; the PCM of its frames offset .. offset + count."""
        # NOTE: a big batch goes through HiFi-GAN in row groups (HiFiGan.CALL_FRAMES); the
        # engine's own split (decoder_batch_frames) counts the flow's wider window.
        rows = max(1, self.hifigan.CALL_FRAMES // z.shape[2])
        audio = torch.cat([self.hifigan(z[i: i + rows]) for i in range(0, z.shape[0], rows)])
        hop = self.hifigan.hop_length  # per teacher frame
        return audio[:, offset * hop: (offset + count) * hop]

    def _decode_streamed(self, frames: torch.Tensor, state: dict[str, torch.Tensor],
                         new: int, history: int) -> torch.Tensor:
        """The prior frames [B, C, new + lookahead] of a window -> PCM of the new ones,
        through the streamed flow (piper/flow.py). The slot keeps each coupling's input
        tail (`flow`) and z from HiFi-GAN's context before the next window's first frame to
        as far as z is known (`z`, right-aligned).

        Windows come as the engine sends them: the first of a clause has no history; until
        the clause's end is in sight the lookahead is the whole decoder context, so each
        window's prior reaches a fixed distance past the last one's end and z is final to
        a fixed distance past its new frames; the window that first reaches the clause's
        end (a shorter lookahead) computes z to that end, and the windows after it, with
        less than a context of frames left, only read z from the slot."""
        flow = self.streamed_flow
        assert flow is not None
        context = DECODER_CONTEXT_FRAMES
        lookahead = self.traits.decoder_lookahead * self.frames_per_step
        known = frames.shape[2]  # frames of prior from the first new one on
        first = history == 0
        # where the first new frame is in z: HiFi-GAN's context before it, or the clause's
        # start (the engine's history is all that was done while under the decoder's)
        offset = min(history * self.frames_per_step, context)
        ahead = known if not first and known < lookahead else lookahead - flow.context
        valid = 0 if first else offset + ahead  # z the slot holds
        before = state["z"][:, :, state["z"].shape[2] - valid:]
        if first or known >= lookahead:  # z to compute: to its end, or to where it is final
            where = FlowWindow(first=first, last=known - new < lookahead)
            prior = frames if first else frames[:, :, lookahead - 2 * flow.reach:]
            caches = [] if first else list(state["flow"].unbind(1))
            z_new, kept = flow.stream(prior, caches, where)
            z = torch.cat([before, z_new], 2)
            if not where.last:
                state["flow"] = torch.stack(kept, 1)
        else:  # the clause's end was reached before: its z is all in the slot
            z = before
        audio = self._vocode(z[:, :, : offset + new + context], offset, new)
        tail = z[:, :, max(0, offset + new - context):]
        state["z"] = nn.functional.pad(tail, (state["z"].shape[2] - tail.shape[2], 0))
        return audio

    # --- one request, offline ------------------------------------------------------------

    @torch.no_grad()
    def clause_latents(self, ids: torch.Tensor, kv: ContiguousKV, params: StudentParams,
                       generator: torch.Generator) -> torch.Tensor:
        """Generate one clause into `kv` (the engine's EOS rule); returns [S, D], retimed
        (`retiming`) at the end where its speed is."""
        plan_after = self.student.frames_after_eos if params.frames_after_eos is None \
            else params.frames_after_eos
        speed, retiming = self._pace(params.speed)
        features = self.text_features(ids.tolist(), speed)
        self.prefill_tokens(ids, kv.next_positions(len(ids)), kv, features)
        kv.commit()
        clauses = None
        if self.traits.steps_read_clause:
            assert features is not None
            clauses = (features[None], torch.tensor([len(ids)]))
        latent = torch.full((1, self.latent_dim), float("nan"))
        frames: list[torch.Tensor] = []
        eos_at = None
        for index in range(self.max_frames(len(ids), speed)):
            noise = self.sample_noise(generator, params)[None]
            latent, logit = self.step_batch(latent, kv.next_positions(1)[:, 0], kv, noise,
                                            params.sampler_steps, clauses)
            kv.commit()
            if eos_at is None and index >= MIN_STEPS_BEFORE_EOS \
                    and float(logit) > self.eos_threshold(params):
                eos_at = index
            if eos_at is not None and index >= eos_at + plan_after:
                break
            frames.append(latent[0])
        latents = torch.stack(frames) if frames else torch.zeros(0, self.latent_dim)
        if isinstance(retiming, ZResampling):
            return resample_z_latents(latents, retiming)  # decoded with z=True
        return latents if retiming is None else retime_latents(latents, retiming)

    def max_frames(self, num_ids: int, speed: float = 1.0) -> int:
        """The length cap of a clause of `num_ids` phoneme ids, in AR steps (longer for
        slower speech)."""
        return math.ceil(num_ids * MAX_FRAMES_PER_ID / (self.frames_per_step * min(speed, 1.0))
                         + PADDING_SECONDS * self.audio.frame_rate)

    @torch.no_grad()
    def synthesize(self, text: str, seed: int = 0, max_tokens: int = 400,
                   params: StudentParams | None = None,
                   context_window: int | None = None,
                   block_size: int = 16, keep_text: bool = True) -> torch.Tensor:
        """The whole text as PCM [N], each clause decoded whole; one generator throughout.
        `context_window=None` (the engine's default for this family, `chaining="pocket"`):
        each clause in a fresh context. Else the clauses are chained as the engine chains
        them: each is prefilled after the last `context_window` positions of the ones
        before, the older ones dropped in whole blocks of `block_size`; `keep_text=False`
        (the engine's `chaining="audio"`) also drops the blocks that hold only the
        previous clause's ids and what came before them."""
        params = params or StudentParams(seed=seed)
        generator = torch.Generator().manual_seed(params.seed)
        z = isinstance(self.retiming(params.speed), ZResampling)
        pieces = []
        kv, steps_start = None, 0  # steps_start: where the last clause's AR steps began
        for clause in split_text(text, self.count_tokens, max_tokens):
            if kv is None or context_window is None:
                kv = ContiguousKV(*self.kv_shape, dtype=torch.float32, device=torch.device("cpu"))
            else:
                cutoff = kv.start + kv.length - context_window
                if not keep_text:
                    cutoff = max(cutoff, steps_start)
                kv.drop_before(max(0, cutoff) // block_size * block_size)
            ids = torch.tensor(self.phoneme_ids(clause), dtype=torch.long)
            steps_start = kv.start + kv.length + len(ids)
            latents = self.clause_latents(ids, kv, params, generator)
            if len(latents):
                pieces.append(self.decode(latents[None], self.new_decoder_state(), z=z)[0])
        return torch.cat(pieces) if pieces else torch.zeros(0)


def load_student_family(config: str | Path | None = None, weights: str | Path | None = None,
                        seed: int = 0, device: str | torch.device = "cpu") -> StudentFamily:
    """The student with the teacher's phonemizer and HiFi-GAN. Without weights (none given,
    none named by the config) it gets seeded random weights: it runs, but speaks noise.
    Without a config: the one beside the weights (an export's `config.yaml`: a student
    trained with other inputs, e.g. a pace input), else the shipped one."""
    if config is None:
        beside = Path(weights).parent / "config.yaml" if weights is not None else None
        config = beside if beside is not None and beside.is_file() else DEFAULT_CONFIG
    from polyvox.models.piper.front import PiperFront
    from polyvox.models.piper.hifigan import HiFiGan
    from polyvox.models.piper.onnx_graph import load_vits_graph
    from polyvox.models.piper.phonemes import Phonemizer
    from polyvox.models.piper.voice_files import voice_files

    student = load_config(config)
    is_random = weights is None and student.weights_path is None
    if is_random:
        flow_lm = build_student(student)
        random_init(nn.ModuleDict({"flow_lm": flow_lm}), seed)
        logger.warning("no weights for pocket/%s: random weights (seed %d), audio will be noise",
                       student.name, seed)
    else:
        student, flow_lm = load_student(config, weights)
    files = voice_files(None)
    vits = load_vits_graph(str(files.onnx_path))
    hifigan = HiFiGan.from_vits(vits).eval()
    needs_front = student.teacher_latent == "prior" or student.text_features is not None
    front = PiperFront(vits, num_threads=torch.get_num_threads()) if needs_front else None
    streamed = PiperFlow.from_vits(vits).eval().to(device) \
        if student.teacher_latent == "prior" else None
    family = StudentFamily(student, flow_lm.to(device), Phonemizer(files.read_config()),
                           hifigan.to(device), front, is_random=is_random,
                           streamed_flow=streamed)
    return family
