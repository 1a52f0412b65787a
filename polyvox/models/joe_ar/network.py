"""joe-ar's network: a Pocket-family FlowLM over the Piper teacher's phonemes and grouped
latents, its config, and loading its exported weights (the serving half; training is in
polyvox.train, which imports this module, never the reverse).

    phoneme ids ──LUT──┐
    previous step ─────┴─► FlowLM backbone ─► flow-matching head ─► next step latent
      (G teacher frames,                     └─► EOS logit
       normalized, G x 192)

One AR step carries `frames_per_step` (G) teacher frames, frame-major: latent[g * 192 + c]
is channel c of frame g. Latents are generated normalized per channel; `denormalize`
(the FlowLM's emb_std / emb_mean) gives teacher z back.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
import safetensors.torch
import yaml
from torch import nn

from polyvox.models.pocket.config import (
    BackboneConfig,
    FlowHeadConfig,
    FlowLMConfig,
    LookupTableConfig,
)
from polyvox.models.pocket.flow_lm import FlowLM
from polyvox.models.pocket.heads import check_draws
from polyvox.models.pocket.weights import load_strict

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "pocket" / "joe_ar.yaml"
PREFIX = "flow_lm."  # exported tensors carry pocket-tts' TTSModel names


@dataclass(frozen=True)
class StudentConfig:
    """The FlowLM (pocket-tts' YAML layout) plus what ties it to the teacher."""

    flow_lm: FlowLMConfig
    frames_per_step: int = 4  # G teacher frames per AR step
    latent_channels: int = 192  # teacher z channels
    teacher: str = "en_US-joe-medium"
    teacher_noise: bool = False
    # The teacher latent the student generates: "prior" (the prior's mean; the decoder
    # runs the teacher's flow, then HiFi-GAN) or "z" (HiFi-GAN's input). teacher_data.py
    teacher_latent: str = "prior"
    # Extra per-token text input: "teacher_prior" adds, to each phoneme id's embedding, a
    # projection of the teacher's text-encoder output for it (the prior mean of that id,
    # computed at prefill from the ids alone, no durations); None: ids only.
    text_features: str | None = None
    # Pace input (issue 25): with speed_input, each text position also reads the clause's
    # log speed (1 / the teacher's length-scale factor), through a projection that starts
    # at zero; the teacher data spans SPEED_RANGE.
    speed_input: bool = False
    default_temperature: float = 1.0
    # Each AR step's latent is the mean of the head run from this many noises (1 or
    # even; heads.sample): the head's conditional mean at that many head rows per row.
    head_draws: int = 1
    # Pointer generation (docs/distill.md, session 28): with a width > 0, a head of that
    # width reads each step's state and picks which of the step's frames start the next
    # phoneme id; the frames are the teacher's encodings of the ids pointed at (the
    # per-token features), not samples of the flow head. 0: the flow head generates.
    pointer_width: int = 0
    # With pointer_context, the pointer head also reads where the pointer stands: the
    # encodings of the next two ids and how many of the last step's frames sat on the
    # current id (pointer_context below).
    pointer_context: bool = False
    # Speeds other than 1 by retiming (docs/distill.md, session 31; polyvox.models.retime):
    # a pointer student speaks at speed 1 and each id's run of d frames becomes about
    # scale x d^exponent frames, with this exponent for faster speech (speed > 1) and
    # that one for slower; None: the pace input (speed_input) alone sets the pace.
    # `run_counts[k]`: how often the teacher holds an id for k + 1 frames (what makes
    # the retimed clause 1 / speed as long on average; scripts/run_lengths.py).
    retime_faster: float | None = None
    retime_slower: float | None = None
    run_counts: tuple[float, ...] = ()
    # Faster speech by resampling z instead (docs/distill.md, session 33): the student
    # speaks at speed 1 and the teacher flow's output is resampled linearly in time
    # (polyvox.models.retime.ZResampling); retime_faster is then unused.
    faster_in_z: bool = False
    default_eos_threshold: float = 0.0  # EOS logit above which a clause ends
    frames_after_eos: int = 0  # AR steps kept after the EOS step
    weights_path: str | None = None  # relative to the config file
    name: str = "joe-ar"

    def __post_init__(self) -> None:
        if self.frames_per_step < 1:
            raise ValueError("frames_per_step must be >= 1")
        if self.flow_lm.flow.type != "flow_matching":
            raise ValueError("the distilled student trains a flow_matching head only")
        check_draws(self.head_draws)
        if self.teacher_latent not in ("prior", "z"):
            raise ValueError(f"teacher_latent must be 'prior' or 'z', not {self.teacher_latent!r}")
        if self.text_features not in (None, "teacher_prior"):
            raise ValueError("text_features must be 'teacher_prior' or null, "
                             f"not {self.text_features!r}")
        if self.speed_input and self.text_features is None:
            raise ValueError("speed_input rides on the per-token features: it needs "
                             "text_features 'teacher_prior'")
        if self.pointer_width < 0:
            raise ValueError("pointer_width must be >= 0")
        if self.pointer_context and not self.pointer_width:
            raise ValueError("pointer_context needs a pointer head (pointer_width > 0)")
        if self.pointer_width and self.text_features is None:
            raise ValueError("a pointer student copies the per-token teacher encodings: "
                             "it needs text_features 'teacher_prior'")
        retimes = self.retime_faster is not None or self.retime_slower is not None
        if retimes and not (self.pointer_width and self.run_counts):
            raise ValueError("retiming (retime_faster / retime_slower) needs a pointer "
                             "student (its frames come in runs) and the teacher's run_counts")
        if any(e is not None and not e > 0 for e in (self.retime_faster, self.retime_slower)):
            raise ValueError("a retiming exponent must be positive")
        if self.faster_in_z and self.teacher_latent != "prior":
            raise ValueError("faster_in_z resamples the teacher flow's output: it needs "
                             "teacher_latent 'prior' (the decoder runs that flow)")
        object.__setattr__(self, "run_counts", tuple(float(c) for c in self.run_counts))
        if self.text_features == "teacher_prior" and self.teacher_latent != "prior":
            raise ValueError("text_features 'teacher_prior' needs teacher_latent 'prior' "
                             "(the features are read from the prior-mean data)")

    @property
    def latent_dim(self) -> int:
        return self.latent_channels * self.frames_per_step


def config_from_dict(data: dict[str, Any], name: str = "joe-ar") -> StudentConfig:
    data = dict(data)
    flow_lm = dict(data.pop("flow_lm"))
    built = FlowLMConfig(
        flow=FlowHeadConfig(**flow_lm.pop("flow")),
        transformer=BackboneConfig(**flow_lm.pop("transformer")),
        lookup_table=LookupTableConfig(**flow_lm.pop("lookup_table")),
        **flow_lm,
    )
    data.setdefault("name", name)
    return StudentConfig(flow_lm=built, **data)


def load_config(path: str | Path = DEFAULT_CONFIG) -> StudentConfig:
    """A student YAML file; its `name` defaults to the file's stem with - for _."""
    path = Path(path)
    with open(path, encoding="utf-8") as file:
        return config_from_dict(yaml.safe_load(file), name=path.stem.replace("_", "-"))


def config_to_dict(config: StudentConfig) -> dict[str, Any]:
    """The YAML-ready form (the inverse of config_from_dict)."""
    data = dataclasses.asdict(config)
    data["run_counts"] = list(data["run_counts"])  # YAML's safe dumper has no tuples
    return data


SPEED_RANGE = (0.5, 2.0)  # the speeds the teacher data spans (teacher_data.py)


def speed_features(log_speed: torch.Tensor) -> torch.Tensor:
    """[...] log speed -> [..., 2]: what the speed projection reads."""
    return torch.stack([log_speed, log_speed.square()], dim=-1)


class PointerHead(nn.Module):
    """[B, d] step state (+ [B, context_width] pointer context, when it reads one) ->
    [B, 2^G] logits over which of the step's G frames start the next phoneme id (bit g
    set: frame g does)."""

    def __init__(self, d_model: int, frames_per_step: int, width: int,
                 channels: int = 0) -> None:
        super().__init__()
        self.frames_per_step = frames_per_step
        # the context: two encodings of `channels`, and a one-hot of 0..G frames
        self.context_width = 2 * channels + frames_per_step + 1 if channels else 0
        self.net = nn.Sequential(nn.Linear(d_model + self.context_width, width), nn.GELU(),
                                 nn.Linear(width, width), nn.GELU(),
                                 nn.Linear(width, 2 ** frames_per_step))

    def forward(self, hidden: torch.Tensor, context: torch.Tensor | None = None) -> torch.Tensor:
        if self.context_width:
            if context is None:
                raise ValueError("this pointer head reads the pointer's context")
            hidden = torch.cat([hidden, context.to(hidden.dtype)], dim=-1)
        return self.net(hidden)


def teacher_pointers(durations: torch.Tensor, steps: int,
                     frames_per_step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the teacher's pointer stands before each of `steps` steps, as pointer_step
    finds it from the previous step's frames: (pointer [S], -1 before the first step;
    dwell [S], how many of the previous step's frames were on that id). Frames past the
    clause's end are its last id's, as in group_frames' last step."""
    frame_ids = torch.repeat_interleave(torch.arange(len(durations)), durations)
    padded = torch.full((steps * frames_per_step,), len(durations) - 1)
    padded[: len(frame_ids)] = frame_ids[: len(padded)]
    previous = padded.view(steps, frames_per_step)[:-1]  # [S - 1, G]
    pointer = torch.cat([torch.tensor([-1]), previous[:, -1]])
    same = (previous == previous[:, -1:]).flip(1).long().cumprod(1).sum(1)
    return pointer, torch.cat([torch.tensor([0]), same])


def pointer_context(pointer: torch.Tensor, dwell: torch.Tensor, encodings: torch.Tensor,
                    counts: torch.Tensor, frames_per_step: int) -> torch.Tensor:
    """What a context-reading pointer head reads beside the step state, for B rows:
    pointer [B] (the id the last frame copied; -1 before the clause's first), dwell [B]
    (how many of the last step's frames sat on it, 0..G), encodings [B, N, C], counts [B]
    -> [B, 2C + G + 1]: the encodings of the next two ids (the last id past the end),
    then dwell one-hot."""
    rows = torch.arange(len(pointer), device=encodings.device)
    last = counts - 1
    after = [encodings[rows, torch.minimum(pointer + step, last)] for step in (1, 2)]
    dwell = F.one_hot(dwell.long(), frames_per_step + 1).to(encodings.dtype)
    return torch.cat([*after, dwell], dim=-1)


def step_patterns(durations: torch.Tensor, steps: int, frames_per_step: int) -> torch.Tensor:
    """The pointer head's targets: [S] per step, bit g set when frame g of the step
    starts a phoneme id (durations [N] frames per id, summing to <= S * G)."""
    starts = torch.zeros(steps * frames_per_step, dtype=torch.long)
    starts[durations.cumsum(0) - durations] = 1
    bits = starts.view(steps, frames_per_step) << torch.arange(frames_per_step)
    return bits.sum(1)


def pointer_step(head: PointerHead, hidden: torch.Tensor, last_step: torch.Tensor,
                 encodings: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """One pointer step for B rows. hidden [B, d] (the step state the head reads);
    last_step [B, G, C], each row's previous step's frames (NaN: the clause's first
    step); encodings [B, N, C] each row's clause's per-id encodings (rows padded past
    counts [B]). Returns the step's frames [B, G, C]: the row's pointer is the id its
    last frame copied (the clause's first step: before id 0), the head's most likely
    pattern moves it one id on at each set bit (never past the last id), and each frame
    copies the encoding pointed at."""
    rows, ids = encodings.shape[:2]
    group = head.frames_per_step
    last_frames = last_step[:, -1]
    distance = (encodings - last_frames[:, None]).square().sum(-1)  # [B, N]
    padding = torch.arange(ids, device=encodings.device)[None] >= counts[:, None]
    # the last of equal encodings: a tie can never move a pointer back
    distance = distance.masked_fill(padding, float("inf")).flip(1)
    pointer = ids - 1 - distance.argmin(1)
    first = last_frames[:, 0].isnan()
    pointer = torch.where(first, -1, pointer)
    context = None
    if head.context_width:
        # frames on the current id are exact copies of the last one: count them from the end
        same = (last_step == last_frames[:, None]).all(-1).flip(1).long()
        dwell = torch.where(first, 0, same.cumprod(1).sum(1))
        context = pointer_context(pointer, dwell, encodings, counts, group)
    logits = head(hidden, context)
    patterns = torch.arange(2 ** group, device=logits.device)
    # the clause's first frame starts its first id: only patterns with bit 0 set
    starts_first = (patterns % 2 == 1)[None] | ~first[:, None]
    chosen = logits.masked_fill(~starts_first, float("-inf")).argmax(1)
    bits = (chosen[:, None] >> torch.arange(group, device=logits.device)) & 1
    index = torch.minimum(pointer[:, None] + bits.cumsum(1), counts[:, None] - 1)
    return encodings[torch.arange(rows, device=encodings.device)[:, None], index]


class StudentFlowLM(FlowLM):
    """A FlowLM whose text embedding may add per-token features: with `text_features`
    "teacher_prior", token i's embedding is LUT(id_i) + prior_proj(normalized m_i), m_i
    being the teacher's prior mean for id i (192 channels, normalized by the latent
    statistics' first frame). With `speed_input`, the features carry one more column,
    the clause's log speed, and the embedding adds speed_proj(log s, log² s). Both
    projections start at zero: a student without them loads into one with them and
    computes exactly what it computed before."""

    def __init__(self, config: StudentConfig) -> None:
        super().__init__(config.flow_lm, config.latent_dim, voice_latent_dim=1)
        self.feature_channels = config.latent_channels
        self.head_draws = config.head_draws
        self.prior_proj: nn.Linear | None = None
        self.speed_proj: nn.Linear | None = None
        self.pointer_head: PointerHead | None = None
        if config.pointer_width:
            self.pointer_head = PointerHead(
                self.d_model, config.frames_per_step, config.pointer_width,
                config.latent_channels if config.pointer_context else 0)
        if config.text_features == "teacher_prior":
            self.prior_proj = nn.Linear(config.latent_channels, self.d_model, bias=False)
            nn.init.zeros_(self.prior_proj.weight)
        if config.speed_input:
            self.speed_proj = nn.Linear(2, self.d_model, bias=False)
            nn.init.zeros_(self.speed_proj.weight)

    @property
    def feature_width(self) -> int:
        """Columns of the per-token features: the prior mean, then log speed if read."""
        return self.feature_channels + (self.speed_proj is not None)

    @property  # type: ignore[override]
    def needs_features(self) -> bool:
        return self.prior_proj is not None

    def embed_text(self, tokens: torch.Tensor,
                   features: torch.Tensor | None = None) -> torch.Tensor:
        """tokens [..., T] (+ features [..., T, feature_width]: the teacher's raw prior
        means, then the log speed if the student reads it) -> [..., T, d_model]."""
        if self.prior_proj is None:
            return super().embed_text(tokens, features)
        embedded = self.conditioner(tokens)
        if features is None or features.shape[-1] != self.feature_width:
            raise ValueError(f"this student reads {self.feature_width} features per token "
                             "(the teacher's prior mean"
                             + (", then the log speed)" if self.speed_proj else ")"))
        channels = self.feature_channels
        prior = features[..., :channels].float()
        normalized = (prior - self.emb_mean[:channels]) / self.emb_std[:channels]
        embedded = embedded + self.prior_proj(normalized)
        if self.speed_proj is not None:
            embedded = embedded + self.speed_proj(speed_features(features[..., channels].float()))
        return embedded

    def normalize_features(self, features: torch.Tensor) -> torch.Tensor:
        """Per-token features [..., N, feature_width] -> the teacher encodings [..., N, C]
        in the normalized units of generated frames (what a pointer student emits)."""
        channels = self.feature_channels
        return (features[..., :channels].float() - self.emb_mean[:channels]) \
            / self.emb_std[:channels]


def build_student(config: StudentConfig) -> StudentFlowLM:
    """A FlowLM with the student's shapes. It has no voice input; its speaker projection
    stays a 1-wide placeholder (zero-sized tensors trip seeded init and tooling)."""
    return StudentFlowLM(config)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def ungroup_frames(latents: torch.Tensor, channels: int) -> torch.Tensor:
    """[..., S, G * C] -> [..., S * G, C]."""
    *lead, steps, width = latents.shape
    return latents.reshape(*lead, steps * (width // channels), channels)


def id_features(latents: torch.Tensor, durations: torch.Tensor) -> torch.Tensor:
    """Per id, the latent frame where it starts: [T_frames, C] -> [N, C]. For the prior
    mean (constant over an id's frames) that is the teacher's text encoding of the id.
    VITS gives every id at least one frame; an id of none takes the next id's frame."""
    starts = (durations.cumsum(0) - durations).clamp_max(latents.shape[0] - 1)
    return latents[starts]


def exported_layers(weights: str | Path) -> int:
    """How many backbone layers an export holds (its `flow_lm.transformer.layers.N.` keys)."""
    with safetensors.safe_open(str(weights), "pt") as file:
        found = [int(match[1]) for name in file.keys()
                 if (match := re.match(rf"{re.escape(PREFIX)}transformer\.layers\.(\d+)\.", name))]
    return max(found) + 1 if found else 0


def silence_layers(flow_lm: FlowLM, first: int) -> None:
    """Zero the residual branches' output projections of backbone layers `first` onward:
    each such layer then passes its input through unchanged, so a student deepened from
    an export computes what the export did until training moves them."""
    for layer in flow_lm.transformer.layers[first:]:
        nn.init.zeros_(layer.self_attn.out_proj.weight)
        nn.init.zeros_(layer.linear2.weight)


def read_student_weights(flow_lm: FlowLM, weights: str | Path,
                         keep_missing: tuple[str, ...] = (),
                         leave_out: tuple[str, ...] = ()) -> None:
    """Load an export's flow_lm.* tensors into `flow_lm`, strictly (names the first
    missing, unexpected or misshapen key). Keys starting with a `keep_missing` prefix
    may be absent from the file: they keep the model's values (a student that gained a
    module since the export, e.g. `prior_proj`, zero at init). The file's keys starting
    with a `leave_out` prefix are not read (a module the student does not train)."""
    from polyvox.startup import startup_part

    with startup_part("files read"):
        tensors = safetensors.torch.load_file(str(weights))
    unprefixed = {name.removeprefix(PREFIX): tensor for name, tensor in tensors.items()
                  if name.startswith(PREFIX)}
    if len(unprefixed) != len(tensors):
        extra = sorted(set(tensors) - {PREFIX + name for name in unprefixed})
        raise ValueError(f"{weights}: keys outside flow_lm.* ({extra[0]!r}): not a student export")
    if leave_out:
        unprefixed = {name: tensor for name, tensor in unprefixed.items()
                      if not name.startswith(leave_out)}
    for name, tensor in flow_lm.state_dict().items():
        if name not in unprefixed and name.startswith(keep_missing):
            unprefixed[name] = tensor
    load_strict(flow_lm, unprefixed, str(weights))


def load_student(config_path: str | Path,
                 weights: str | Path | None = None) -> tuple[StudentConfig, FlowLM]:
    """A config file and its weights (its `weights_path`, relative to the file, unless
    `weights` is given) -> the student, strictly loaded, in eval mode."""
    config_path = Path(config_path)
    config = load_config(config_path)
    if weights is None:
        if config.weights_path is None:
            raise FileNotFoundError(f"{config_path} names no weights (weights_path) and none "
                                    "were given: train them with polyvox train distill")
        weights = config_path.parent / config.weights_path
    flow_lm = build_student(config)
    read_student_weights(flow_lm, weights)
    return config, flow_lm.eval()
