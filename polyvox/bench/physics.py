"""Physics first: what the model costs (what the machine can do is in ceilings.py).

- FLOPs of the Pocket TTS family per second of audio, counted from a config: the FlowLM
  (12.5 AR steps per second) and the Mimi decoder. A multiply-add counts as 2 FLOPs;
  only matrix products and convolutions are counted (norms, activations, RoPE and
  softmax are a few percent at most), as `torch.utils.flop_counter` does.
- With a ceiling: efficiency (achieved / ceiling) and the real-time stream limit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from polyvox.models.pocket.config import (
    BackboneConfig,
    MimiTransformerConfig,
    PocketConfig,
    SEANetConfig,
)

# NOTE: keys one AR step attends to, by default: a ~10 s voice prompt (125 frames), a
# clause of text (~25 tokens) and the ~50 frames generated so far, on average.
DEFAULT_CONTEXT = 200
TIME_FREQUENCIES = 256  # sinusoids of the sampler head's time embedding (heads.TimeEmbedding)


def efficiency(achieved_flops_per_s: float, ceiling_gflops: float) -> float:
    """Achieved model FLOP/s as a fraction of the matmul ceiling (given in GFLOP/s)."""
    return achieved_flops_per_s / (ceiling_gflops * 1e9)


def realtime_stream_limit(flops_per_audio_second: float, ceiling_gflops: float) -> float:
    """How many real-time streams the ceiling could feed if all of it went to the model."""
    return ceiling_gflops * 1e9 / flops_per_audio_second


# --- FLOPs of the Pocket TTS family ---------------------------------------------------

def _linear(in_features: int, out_features: int) -> float:
    """FLOPs of one row through a Linear (or one position through a 1x1 conv)."""
    return 2.0 * in_features * out_features


def _attention(heads: int, head_dim: int, keys: int) -> float:
    """FLOPs of one query attending to `keys` keys: scores (QK^T) and the weighted sum."""
    return 4.0 * heads * head_dim * keys


def backbone_flops_per_token(cfg: BackboneConfig, context: int) -> float:
    """One token through the FlowLM transformer, attending to `context` keys."""
    per_layer = (_in_proj_flops(cfg) + _linear(cfg.query_dim, cfg.d_model)
                 + _linear(cfg.d_model, cfg.ffn_dim) + _linear(cfg.ffn_dim, cfg.d_model)
                 + _attention(cfg.num_heads, cfg.head_dim, context))  # grouped KV: H queries
    return cfg.num_layers * per_layer


def _in_proj_flops(cfg: BackboneConfig) -> float:
    """A layer's fused query/key/value projection for one token."""
    return _linear(cfg.d_model, cfg.query_dim + 2 * cfg.kv_heads * cfg.head_dim)


def sampler_head_flops(config: PocketConfig) -> float:
    """One evaluation of the sampler head (heads.SamplerHead) for one row."""
    flow, dim, latent = config.flow_lm.flow, config.flow_lm.flow.dim, config.latent_dim
    cond_dim = config.flow_lm.z_dim or config.flow_lm.transformer.d_model
    time_embeds = flow.num_time_conds * (_linear(TIME_FREQUENCIES, dim) + _linear(dim, dim))
    res_blocks = flow.depth * (2 * _linear(dim, dim) + _linear(dim, 3 * dim))  # MLP + AdaLN
    final = _linear(dim, 2 * dim) + _linear(dim, latent)
    return _linear(latent, dim) + _linear(cond_dim, dim) + time_embeds + res_blocks + final


def sampler_evaluations(sampler_type: str, sampler_steps: int) -> int:
    """Head evaluations per AR step: one per step for the integrating samplers."""
    return sampler_steps if sampler_type in ("lsd", "flow_matching") else 1


def flow_lm_step_flops(config: PocketConfig, context: int = DEFAULT_CONTEXT,
                       sampler_steps: int = 1) -> dict[str, float]:
    """One AR step (FlowLM.step) for one request: backbone (input projection,
    transformer, z projection), sampler head, EOS head."""
    flow_lm, d = config.flow_lm, config.flow_lm.transformer.d_model
    backbone = _linear(config.latent_dim, d) + backbone_flops_per_token(flow_lm.transformer,
                                                                        context)
    if flow_lm.z_dim is not None:
        backbone += _linear(d, flow_lm.z_dim)
    evaluations = sampler_evaluations(flow_lm.flow.type, sampler_steps)
    return {
        "backbone": backbone,
        "sampler": evaluations * sampler_head_flops(config),
        "eos": _linear(flow_lm.z_dim or d, 1),
    }


def prefill_flops_per_token(config: PocketConfig, context: int = DEFAULT_CONTEXT) -> float:
    """One text token prefilled: its embedding projection (low-rank tables) + the backbone
    up to the last layer's keys and values (`Transformer.write_kv`: no prefill reads the
    output, so the last layer stops after its in_proj)."""
    table, backbone = config.flow_lm.lookup_table, config.flow_lm.transformer
    embed = _linear(table.rank, backbone.d_model) if table.rank is not None else 0.0
    full_layer = backbone_flops_per_token(backbone, context) / backbone.num_layers
    return embed + (backbone.num_layers - 1) * full_layer + _in_proj_flops(backbone)


def _mimi_transformer_flops(cfg: MimiTransformerConfig) -> float:
    """One 200 Hz step through the decoder transformer, attending to `context` keys."""
    d, heads = cfg.d_model, cfg.num_heads
    per_layer = (_linear(d, 3 * d) + _linear(d, d) + 2 * _linear(d, cfg.dim_feedforward)
                 + _attention(heads, d // heads, cfg.context))
    flops = cfg.num_layers * per_layer
    if cfg.input_dimension != d:
        flops += _linear(cfg.input_dimension, d)
    if cfg.output_dimensions[0] != d:
        flops += _linear(d, cfg.output_dimensions[0])
    return flops


def _seanet_decoder_flops(cfg: SEANetConfig, positions: int) -> float:
    """The SEANet decoder (mimi.SEANetDecoder) for `positions` input steps. A conv costs
    C_in/groups * C_out * kernel multiply-adds per output step; a transposed conv the same
    per input step."""
    filters = cfg.n_filters * 2 ** len(cfg.ratios)
    flops = positions * _linear(cfg.dimension, filters) * cfg.kernel_size
    for ratio in cfg.ratios:
        flops += positions * _linear(filters, filters // 2) * 2 * ratio  # transposed conv
        positions, filters = positions * ratio, filters // 2
        hidden = filters // cfg.compress
        residual = _linear(filters, hidden) * cfg.residual_kernel_size + _linear(hidden, filters)
        flops += cfg.n_residual_layers * positions * residual
    return flops + positions * _linear(filters, cfg.channels) * cfg.last_kernel_size


def mimi_frame_flops(config: PocketConfig) -> dict[str, float]:
    """Decoding one latent frame (Mimi.decode): 1x1 conv + depthwise x16 transposed conv,
    decoder transformer at the inner rate, SEANet decoder up to the sample rate."""
    mimi, seanet = config.mimi, config.mimi.dec_seanet
    stride = round(mimi.sample_rate / seanet.hop_length / mimi.frame_rate)  # 16 steps/frame
    outer = mimi.outer_dim or seanet.dimension
    upsample = _linear(config.latent_dim, mimi.quantizer.output_dimension)
    upsample += 2.0 * outer * 1 * (2 * stride)  # groups == out channels: 1 output per group
    return {
        "upsample": upsample,
        "transformer": stride * _mimi_transformer_flops(mimi.dec_transformer),
        "seanet": _seanet_decoder_flops(seanet, stride),
    }


def pocket_flop_breakdown(config: PocketConfig, context: int = DEFAULT_CONTEXT,
                          sampler_steps: int = 1,
                          text_tokens_per_second: float = 0.0) -> dict[str, float]:
    """FLOPs per second of audio, per component. Text prefill is left out unless
    `text_tokens_per_second` (tokens prefilled per second of audio) is given."""
    frame_rate = config.mimi.frame_rate
    step = flow_lm_step_flops(config, context, sampler_steps)
    frame = mimi_frame_flops(config)
    return {
        "flow_lm_backbone": frame_rate * step["backbone"],
        "flow_lm_sampler": frame_rate * step["sampler"],
        "flow_lm_eos": frame_rate * step["eos"],
        "flow_lm_prefill": text_tokens_per_second * prefill_flops_per_token(config, context),
        "mimi_upsample": frame_rate * frame["upsample"],
        "mimi_transformer": frame_rate * frame["transformer"],
        "mimi_seanet": frame_rate * frame["seanet"],
    }


def pocket_flops_per_audio_second(config: PocketConfig, context: int = DEFAULT_CONTEXT,
                                  sampler_steps: int = 1,
                                  text_tokens_per_second: float = 0.0) -> dict[str, float]:
    """FLOPs per second of audio: {"flow_lm", "mimi", "total"} (see pocket_flop_breakdown)."""
    parts = pocket_flop_breakdown(config, context, sampler_steps, text_tokens_per_second)
    flow_lm = sum(v for k, v in parts.items() if k.startswith("flow_lm"))
    mimi = sum(v for k, v in parts.items() if k.startswith("mimi"))
    return {"flow_lm": flow_lm, "mimi": mimi, "total": flow_lm + mimi}


# --- measured FLOPs of torch code -----------------------------------------------------

def _cpu_sdpa_flops(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any,
                    **kwargs: Any) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return int(sdpa_flop_count(query_shape, key_shape, value_shape))  # type: ignore[no-untyped-call]


def torch_flop_count(fn: Callable[[], Any]) -> int:
    """FLOPs torch executes in `fn()`, by `torch.utils.flop_counter.FlopCounterMode`,
    with CPU attention counted too (torch only counts its GPU attention kernels)."""
    from torch.utils.flop_counter import FlopCounterMode

    custom = {}
    cpu_attention = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    if cpu_attention is not None:
        custom[cpu_attention] = _cpu_sdpa_flops
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=custom) as counter:
        fn()
    return int(counter.get_total_flops())
