"""Configuration of the Pocket TTS family, in pocket-tts' YAML layout.

A config is read from a pocket-tts YAML file (same field names, unknown fields rejected) or
taken from the presets in `presets.py`, which mirror every config shipped with
pocket-tts 4.0.1. All dataclasses are frozen; `__post_init__` checks what the model code
relies on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

SAMPLER_TYPES = ("lsd", "flow_matching", "drifting", "pointwise")
T = TypeVar("T")


@dataclass(frozen=True)
class FlowHeadConfig:
    dim: int
    depth: int
    type: str = "lsd"  # one of SAMPLER_TYPES

    def __post_init__(self) -> None:
        if self.type not in SAMPLER_TYPES:
            raise ValueError(f"flow.type must be one of {SAMPLER_TYPES}, got {self.type!r}")

    @property
    def num_time_conds(self) -> int:
        return {"lsd": 2, "flow_matching": 1, "drifting": 0, "pointwise": 0}[self.type]


@dataclass(frozen=True)
class BackboneConfig:
    d_model: int
    num_heads: int
    num_layers: int
    hidden_scale: int = 4
    max_period: float = 10000.0
    attn_dim: int | None = None  # width of queries / attention output; d_model when None
    num_kv_heads: int | None = None  # grouped-query attention; num_heads when None
    dim_feedforward: int | None = None  # d_model * hidden_scale when None

    def __post_init__(self) -> None:
        if self.query_dim % self.num_heads or self.num_heads % self.kv_heads:
            raise ValueError("attn_dim must divide by num_heads, num_heads by num_kv_heads")

    @property
    def query_dim(self) -> int:
        return self.attn_dim or self.d_model

    @property
    def head_dim(self) -> int:
        return self.query_dim // self.num_heads

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def ffn_dim(self) -> int:
        return self.dim_feedforward or self.d_model * self.hidden_scale


@dataclass(frozen=True)
class LookupTableConfig:
    dim: int
    n_bins: int
    tokenizer: str  # "sentencepiece" or "tokenizers"
    tokenizer_path: str
    rank: int | None = None  # low-rank table: rank-wide rows projected to dim


@dataclass(frozen=True)
class FlowLMConfig:
    flow: FlowHeadConfig
    transformer: BackboneConfig
    lookup_table: LookupTableConfig
    dtype: str = "float32"
    z_dim: int | None = None  # bias-free projection of the backbone output for the heads
    weights_path: str | None = None
    insert_bos_before_voice: bool = False


@dataclass(frozen=True)
class SEANetConfig:
    dimension: int
    channels: int
    n_filters: int
    n_residual_layers: int
    ratios: tuple[int, ...]
    kernel_size: int
    residual_kernel_size: int
    last_kernel_size: int
    dilation_base: int
    pad_mode: str
    compress: int

    def __post_init__(self) -> None:
        if self.pad_mode not in ("constant", "replicate"):
            raise ValueError(f"seanet.pad_mode must be constant or replicate, got {self.pad_mode}")

    @property
    def hop_length(self) -> int:
        hop = 1
        for ratio in self.ratios:
            hop *= ratio
        return hop


@dataclass(frozen=True)
class MimiTransformerConfig:
    d_model: int
    input_dimension: int
    output_dimensions: tuple[int, ...]
    num_heads: int
    num_layers: int
    layer_scale: float
    context: int  # attention window, in steps of the 200 Hz inner rate
    dim_feedforward: int
    max_period: float = 10000.0


@dataclass(frozen=True)
class QuantizerConfig:
    dimension: int  # latent width (32)
    output_dimension: int


@dataclass(frozen=True)
class MimiConfig:
    sample_rate: int
    channels: int
    frame_rate: float
    seanet: SEANetConfig
    transformer: MimiTransformerConfig
    quantizer: QuantizerConfig
    dtype: str = "float32"
    weights_path: str | None = None
    inner_dim: int | None = None
    outer_dim: int | None = None
    decoder_seanet: SEANetConfig | None = None
    decoder_transformer: MimiTransformerConfig | None = None

    @property
    def dec_seanet(self) -> SEANetConfig:
        return self.decoder_seanet or self.seanet

    @property
    def dec_transformer(self) -> MimiTransformerConfig:
        return self.decoder_transformer or self.transformer

    @property
    def inner_rate(self) -> float:
        """Frame rate between the SEANet and the (de)sampling convs (200 Hz)."""
        return self.sample_rate / self.seanet.hop_length

    @property
    def resample_stride(self) -> int:
        stride = self.inner_rate / self.frame_rate
        if stride != int(stride):
            raise ValueError(f"inner rate {self.inner_rate} is not a multiple of {self.frame_rate}")
        return int(stride)

    @property
    def samples_per_frame(self) -> int:
        return int(self.sample_rate / self.frame_rate)


@dataclass(frozen=True)
class PocketConfig:
    """A whole Pocket TTS model: FlowLM + Mimi + text handling rules."""

    flow_lm: FlowLMConfig
    mimi: MimiConfig
    weights_path: str | None = None
    weights_path_without_voice_cloning: str | None = None
    pad_with_spaces_for_short_inputs: bool = False
    remove_semicolons: bool = False
    append_terminal_punctuation: bool = True
    capitalize_first_letter: bool = True
    replace_characters: dict[str, str] = field(default_factory=dict)
    model_recommended_frames_after_eos: int | None = None
    default_temperature: float = 0.3
    default_eos_threshold: float = -4.0
    name: str = "custom"

    @property
    def latent_dim(self) -> int:
        return self.mimi.quantizer.dimension

    @property
    def voice_latent_dim(self) -> int:
        """Width of the Mimi encoder's latents, the input of the speaker projection."""
        return self.mimi.inner_dim or self.mimi.seanet.dimension

    def replace(self, **changes: Any) -> PocketConfig:
        return dataclasses.replace(self, **changes)


def _build(cls: type[T], data: dict[str, Any], where: str) -> T:
    """Build a (nested) frozen dataclass from a YAML dict, rejecting unknown fields."""
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(data) - set(fields)
    if unknown:
        raise ValueError(f"unknown field(s) in {where}: {sorted(unknown)}")
    nested = {
        "flow": FlowHeadConfig,
        "transformer": BackboneConfig if cls is FlowLMConfig else MimiTransformerConfig,
        "lookup_table": LookupTableConfig,
        "flow_lm": FlowLMConfig,
        "mimi": MimiConfig,
        "seanet": SEANetConfig,
        "decoder_seanet": SEANetConfig,
        "decoder_transformer": MimiTransformerConfig,
        "quantizer": QuantizerConfig,
    }
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key in nested and isinstance(value, dict):
            value = _build(nested[key], value, f"{where}.{key}")
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    try:
        return cls(**kwargs)
    except TypeError as error:
        raise ValueError(f"bad config section {where}: {error}") from None


def config_from_dict(data: dict[str, Any], name: str = "custom") -> PocketConfig:
    data = dict(data)
    data.setdefault("name", name)
    return _build(PocketConfig, data, "config")


def load_config_file(path: str | Path) -> PocketConfig:
    """Read a pocket-tts YAML config file."""
    path = Path(path)
    with open(path, encoding="utf-8") as file:
        data = yaml.safe_load(file)
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a pocket-tts config (expected a mapping)")
    return config_from_dict(data, name=path.stem)


def config_to_dict(config: PocketConfig) -> dict[str, Any]:
    """The YAML-ready form of a config (pocket-tts field names; `name` dropped)."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, tuple):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    data = plain(config)
    data.pop("name")
    return data
