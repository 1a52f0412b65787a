"""Mimi, the audio codec of Pocket TTS: a streaming decoder (latents -> 24 kHz PCM) and the
encoder that turns a voice prompt into latents.

    decode: latent [32] @12.5 Hz ─1×1 conv─► ×16 transposed conv ─► transformer (200 Hz,
            windowed attention) ─► SEANet decoder (×6 ×5 ×4) ─► 1920 samples per frame
    encode: PCM ─► SEANet encoder (÷120) ─► transformer ─► ÷16 conv ─► latent @12.5 Hz

The decoder streams with explicit per-request state (see convs.py): conv history,
transposed-conv overlap, and the transformer's last `context` keys/values. Decoding a
sequence in chunks with carried state equals decoding it at once.

Parameter names follow pocket-tts' checkpoint layout (`mimi.*`).
"""

from __future__ import annotations

import torch
from torch import nn

from polyvox.models.layers.attention import NoCache, WindowKV
from polyvox.models.layers.cpu_kernels import elu_bf16
from polyvox.models.layers.transformer import Transformer
from polyvox.models.pocket.config import MimiConfig, MimiTransformerConfig, SEANetConfig
from polyvox.models.pocket.convs import (
    DecoderState,
    StreamingConv1d,
    StreamingConvTranspose1d,
    name_streaming_modules,
)


class ELU(nn.ELU):
    """nn.ELU (alpha 1) that runs bfloat16 CPU inputs through the compiled kernel
    (layers/cpu_kernels.py: ~1 bf16 ulp from ATen at most, several times faster); any
    other input, or no kernel, takes nn.ELU's path. No parameters: checkpoints unchanged."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (x.dtype == torch.bfloat16 and x.device.type == "cpu" and self.alpha == 1.0
                and not (torch.is_grad_enabled() and x.requires_grad)):
            kernel = elu_bf16()
            if kernel is not None:
                return kernel(x.contiguous())
        return super().forward(x)


class ResnetBlock(nn.Module):
    """x + conv1x1(elu(conv_k(elu(x)))), the SEANet residual unit."""

    def __init__(self, dim: int, kernel_size: int, dilation: int, pad_mode: str,
                 compress: int) -> None:
        super().__init__()
        hidden = dim // compress
        # NOTE: indices 1 and 3 carry weights (0 and 2 are the ELUs), as in the checkpoints.
        self.block = nn.ModuleList([
            ELU(),
            StreamingConv1d(dim, hidden, kernel_size, dilation=dilation, pad_mode=pad_mode),
            ELU(),
            StreamingConv1d(hidden, dim, 1, pad_mode=pad_mode),
        ])

    def forward(self, x: torch.Tensor, state: DecoderState | None) -> torch.Tensor:
        y = x
        for layer in self.block:
            y = layer(y, state) if isinstance(layer, StreamingConv1d) else layer(y)
        return x + y


def _run(layers: nn.ModuleList, x: torch.Tensor, state: DecoderState | None) -> torch.Tensor:
    for layer in layers:
        if isinstance(layer, (StreamingConv1d, StreamingConvTranspose1d, ResnetBlock)):
            x = layer(x, state)
        else:
            x = layer(x)
    return x


def _residuals(cfg: SEANetConfig, dim: int) -> list[nn.Module]:
    return [
        ResnetBlock(dim, cfg.residual_kernel_size, cfg.dilation_base**j, cfg.pad_mode, cfg.compress)
        for j in range(cfg.n_residual_layers)
    ]


class SEANetEncoder(nn.Module):
    def __init__(self, cfg: SEANetConfig) -> None:
        super().__init__()
        filters = cfg.n_filters
        layers: list[nn.Module] = [
            StreamingConv1d(cfg.channels, filters, cfg.kernel_size, pad_mode=cfg.pad_mode)
        ]
        for ratio in reversed(cfg.ratios):
            layers += _residuals(cfg, filters)
            layers += [ELU(), StreamingConv1d(filters, 2 * filters, 2 * ratio, stride=ratio,
                                                 pad_mode=cfg.pad_mode)]
            filters *= 2
        layers += [ELU(), StreamingConv1d(filters, cfg.dimension, cfg.last_kernel_size,
                                             pad_mode=cfg.pad_mode)]
        self.model = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _run(self.model, x, None)


class SEANetDecoder(nn.Module):
    def __init__(self, cfg: SEANetConfig) -> None:
        super().__init__()
        filters = cfg.n_filters * 2 ** len(cfg.ratios)
        layers: list[nn.Module] = [
            StreamingConv1d(cfg.dimension, filters, cfg.kernel_size, pad_mode=cfg.pad_mode)
        ]
        for ratio in cfg.ratios:
            layers += [ELU(), StreamingConvTranspose1d(filters, filters // 2, 2 * ratio, ratio)]
            filters //= 2
            layers += _residuals(cfg, filters)
        layers += [ELU(), StreamingConv1d(filters, cfg.channels, cfg.last_kernel_size,
                                             pad_mode=cfg.pad_mode)]
        self.model = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor, state: DecoderState | None) -> torch.Tensor:
        return _run(self.model, x, state)


class ProjectedTransformer(nn.Module):
    """Channels-first wrapper: x [B, C_in, T] -> [B, C_out, T], optional in/out projections."""

    STEPS_PER_CALL = 64  # most new steps one transformer call adds to a streaming state

    def __init__(self, cfg: MimiTransformerConfig) -> None:
        super().__init__()
        if len(cfg.output_dimensions) != 1:
            raise ValueError("Mimi transformers with several outputs are not supported")
        self.context = cfg.context
        self.transformer = Transformer(
            cfg.d_model, cfg.num_heads, cfg.num_layers, cfg.dim_feedforward, cfg.max_period,
            context=cfg.context, layer_scale=cfg.layer_scale,
        )
        self.input_proj = (
            nn.Linear(cfg.input_dimension, cfg.d_model, bias=False)
            if cfg.input_dimension != cfg.d_model else None
        )
        out_dim = cfg.output_dimensions[0]
        self.output_projs = nn.ModuleList(
            [nn.Identity() if out_dim == cfg.d_model else nn.Linear(cfg.d_model, out_dim, bias=False)]
        )

    @property
    def window(self) -> int:
        """Ring size of the streaming state: the context plus room for a call's new steps."""
        return self.context + self.STEPS_PER_CALL - 1

    def state_shapes(self, prefix: str) -> dict[str, tuple[int, ...]]:
        t = self.transformer
        shapes: dict[str, tuple[int, ...]] = {f"{prefix}offset": ()}
        for layer in range(t.num_layers):
            kv_shape = (self.window, t.kv_heads, t.head_dim)
            shapes |= {f"{prefix}{layer}.k": kv_shape, f"{prefix}{layer}.v": kv_shape,
                       f"{prefix}{layer}.pos": (self.window,)}
        return shapes

    def forward(self, x: torch.Tensor, state: DecoderState | None, prefix: str) -> torch.Tensor:
        x = x.transpose(1, 2)
        if self.input_proj is not None:
            x = self.input_proj(x)
        steps = torch.arange(x.shape[1], device=x.device)
        if state is None:
            positions = steps[None].expand(x.shape[0], -1)
            y = self.transformer(x, positions, NoCache())
        else:
            # NOTE: the window is a ring with room for STEPS_PER_CALL new steps (WindowKV);
            # longer inputs go through in pieces, which a causal stack allows exactly.
            pieces = []
            for start in range(0, max(x.shape[1], 1), self.STEPS_PER_CALL):
                piece = x[:, start: start + self.STEPS_PER_CALL]
                positions = state[f"{prefix}offset"][:, None] + steps[:piece.shape[1]]
                pieces.append(self.transformer(piece, positions, WindowKV(state, prefix)))
                state[f"{prefix}offset"] = state[f"{prefix}offset"] + piece.shape[1]
            y = pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=1)
        return self.output_projs[0](y).transpose(1, 2)


class _Quantizer(nn.Module):
    def __init__(self, dimension: int, output_dimension: int) -> None:
        super().__init__()
        self.output_proj = nn.Conv1d(dimension, output_dimension, 1, bias=False)


class _Resample(nn.Module):
    """Holds the ÷16 conv (`conv`) or the ×16 depthwise transposed conv (`convtr`)."""

    def __init__(self, module: nn.Module, attribute: str) -> None:
        super().__init__()
        setattr(self, attribute, module)


class Mimi(nn.Module):
    def __init__(self, cfg: MimiConfig) -> None:
        super().__init__()
        self.cfg = cfg
        stride = cfg.resample_stride
        dec = cfg.dec_seanet
        self.encoder = SEANetEncoder(cfg.seanet)
        self.decoder = SEANetDecoder(dec)
        self.encoder_transformer = ProjectedTransformer(cfg.transformer)
        self.decoder_transformer = ProjectedTransformer(cfg.dec_transformer)
        self.quantizer = _Quantizer(cfg.quantizer.dimension, cfg.quantizer.output_dimension)
        inner = cfg.inner_dim or cfg.seanet.dimension
        outer = cfg.outer_dim or dec.dimension
        self.downsample = _Resample(StreamingConv1d(
            cfg.seanet.dimension, inner, 2 * stride, stride=stride, bias=False,
            pad_mode="replicate"), "conv")
        self.upsample = _Resample(StreamingConvTranspose1d(
            outer, dec.dimension, 2 * stride, stride, groups=dec.dimension, bias=False), "convtr")
        name_streaming_modules(self)

    # --- decoding (streaming) -----------------------------------------------------------

    def decoder_state_shapes(self) -> dict[str, tuple[int, ...]]:
        """Per-request decoder state: name -> shape without the batch dimension."""
        shapes: dict[str, tuple[int, ...]] = {}
        for module in [self.upsample.convtr, *self.decoder.modules()]:
            if isinstance(module, (StreamingConv1d, StreamingConvTranspose1d)):
                shapes |= module.state_shapes()
        return shapes | self.decoder_transformer.state_shapes("decoder_transformer.")

    def new_decoder_state(self, batch_size: int = 1,
                          device: torch.device | str = "cpu") -> DecoderState:
        state: DecoderState = {}
        for name, shape in self.decoder_state_shapes().items():
            if name.endswith(".pos"):
                state[name] = torch.full((batch_size, *shape), -1, dtype=torch.long, device=device)
            elif name.endswith("offset"):
                state[name] = torch.zeros(batch_size, dtype=torch.long, device=device)
            else:
                state[name] = torch.zeros((batch_size, *shape), device=device)
        return state

    def decode(self, latents: torch.Tensor, state: DecoderState) -> torch.Tensor:
        """latents [B, T, 32] (decoder space, i.e. denormalized) -> PCM [B, T * 1920].

        Advances `state`; the output holds only the new samples."""
        x = self.quantizer.output_proj(latents.transpose(1, 2))
        x = self.upsample.convtr(x, state)
        x = self.decoder_transformer(x, state, "decoder_transformer.")
        # NOTE: SEANet's activations take its weights' dtype: with bfloat16 weights
        # (--precision bfloat16) its convs, ELUs and residual adds all run in bfloat16,
        # which halves the bytes they move (most of its time on CPU) and drops the casts
        # around every conv. Float32 weights: unchanged. Audio comes back in float32.
        dtype = self.decoder.model[0].conv.weight.dtype
        return self.decoder(x.to(dtype), state)[:, 0].float()

    # --- encoding (offline, voice prompts) ------------------------------------------------

    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        """audio [B, 1, N] at the model rate -> latents [B, frames, inner_dim].

        The audio is zero-padded at the end to a whole number of frames."""
        frame = self.cfg.samples_per_frame
        padding = -audio.shape[-1] % frame
        audio = torch.nn.functional.pad(audio, (0, padding))
        x = self.encoder(audio)
        x = self.encoder_transformer(x, None, "")
        x = self.downsample.conv(x, None)
        return x.transpose(1, 2)
