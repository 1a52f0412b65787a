"""Causal convolutions that stream: each call continues where the previous one stopped.

A streaming module keeps its history in the request's decoder state, a flat dict of
tensors with the batch dimension first; `state_shapes()` says what it needs (without the
batch dimension) so the engine can preallocate pools of per-request slots.

With `state=None` a module runs offline over a whole signal, starting from silence (or
from its first frame, for "replicate" padding).

Parameter names follow pocket-tts' checkpoint layout (`conv.weight`, `convtr.weight`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from polyvox.models.layers.precision import weight_key

DecoderState = dict[str, torch.Tensor]


class StreamingConv1d(nn.Module):
    """Conv1d with causal (left) context carried across calls: state `<name>.prev`
    [C_in, effective_kernel - stride]."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 dilation: int = 1, groups: int = 1, bias: bool = True,
                 pad_mode: str = "constant") -> None:
        super().__init__()
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride,
                              dilation=dilation, groups=groups, bias=bias)
        self.pad_mode = pad_mode
        self.stride = stride
        self.history = (kernel_size - 1) * dilation + 1 - stride
        self.name = ""  # set by name_streaming_modules

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        if self.history <= 0:
            return {}
        return {f"{self.name}.prev": (self.conv.in_channels, self.history)}

    def forward(self, x: torch.Tensor, state: DecoderState | None) -> torch.Tensor:
        # x [B, C_in, T] with T a multiple of the stride -> [B, C_out, T / stride]
        if x.shape[-1] % self.stride:
            raise ValueError(f"conv input of {x.shape[-1]} steps is not a multiple of {self.stride}")
        if self.history <= 0:
            return self.conv(x)
        if state is None:
            if self.pad_mode == "replicate":
                previous = x[..., :1].expand(-1, -1, self.history)
            else:
                previous = x.new_zeros(x.shape[0], x.shape[1], self.history)
        else:
            previous = state[f"{self.name}.prev"].to(x.dtype)
        x = torch.cat([previous, x], dim=-1)
        if state is not None:
            state[f"{self.name}.prev"] = x[..., -self.history:]
        return self.conv(x)


class StreamingConvTranspose1d(nn.Module):
    """ConvTranspose1d streamed in polyphase form. With kernel <= 2 * stride, output block t
    (`stride` samples) depends only on input frames t and t - 1:

        y[t * S + s] = W[:, s] . x[t] + W[:, S + s] . x[t - 1]   (kernel zero-padded to 2S)

    so one convolution of kernel 2 over [x[t - 1], x[t]] into C_out * S channels gives
    every block at once (a GEMM, no overlap-add of per-frame outputs: ~2x faster in
    float32, ~4x in bfloat16 on CPU than scattering kernel-wide contributions). The
    state is the last input frame: `<name>.prev` [C_in, 1]."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 groups: int = 1, bias: bool = True) -> None:
        super().__init__()
        if kernel_size > 2 * stride:
            raise ValueError("streaming transposed conv needs kernel_size <= 2 * stride")
        self.convtr = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride,
                                         groups=groups, bias=bias)
        self.stride = stride
        self.name = ""
        self._kernel: tuple[tuple[object, ...], torch.Tensor] | None = None

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {f"{self.name}.prev": (self.convtr.in_channels, 1)}

    def _taps(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The weight's taps for x[t] and x[t - 1], each [C_in, C_out / groups, S]."""
        weight, stride = self.convtr.weight, self.stride  # [C_in, C_out / groups, K]
        if weight.shape[-1] < 2 * stride:
            weight = F.pad(weight, (0, 2 * stride - weight.shape[-1]))
        return weight[..., :stride], weight[..., stride:]

    def _polyphase_kernel(self) -> torch.Tensor:
        """[C_out * S, C_in, 2]: the kernel-2 conv's weight, rebuilt only when the weight
        changes: building it every call cost ~4% of a small decoder call."""
        key = weight_key(self.convtr.weight)
        if self._kernel is None or self._kernel[0] != key:
            head, tail = self._taps()
            kernel = torch.stack([tail, head], dim=-1)  # [C_in, C_out, S, 2]
            kernel = kernel.permute(1, 2, 0, 3).reshape(self.convtr.out_channels * self.stride,
                                                        self.convtr.in_channels, 2)
            self._kernel = (key, kernel.contiguous())
        return self._kernel[1]

    def forward(self, x: torch.Tensor, state: DecoderState | None) -> torch.Tensor:
        # x [B, C_in, T] -> [B, C_out, T * stride]
        key = f"{self.name}.prev"
        stride, (batch, channels, steps) = self.stride, x.shape
        if state is None:
            previous = x.new_zeros(batch, channels, 1)
        else:
            previous = state[key].to(x.dtype)
            state[key] = x[..., -1:].clone()
        extended = torch.cat([previous, x], dim=-1)  # [B, C_in, T + 1]: x[t - 1] at t
        # NOTE: the weight may be stored in a lower precision (layers/precision.py): the
        # products run in its dtype, the result comes back in the input's.
        groups, out_channels = self.convtr.groups, self.convtr.out_channels
        if groups == 1:
            kernel = self._polyphase_kernel()
            y = F.conv1d(extended.to(kernel.dtype), kernel).to(x.dtype)  # [B, C_out * S, T]
            y = y.view(batch, out_channels, stride, steps).transpose(2, 3)
        elif groups == channels == out_channels:  # depthwise: memory-bound
            head, tail = self._taps()
            y = (x[..., None] * head[:, 0, None].to(x.dtype)
                 + extended[..., :-1, None] * tail[:, 0, None].to(x.dtype))  # [B, C, T, S]
        else:
            raise NotImplementedError("grouped transposed convs other than depthwise")
        y = y.reshape(batch, out_channels, steps * stride)
        if self.convtr.bias is not None:
            y = y + self.convtr.bias[:, None].to(y.dtype)
        return y


def name_streaming_modules(root: nn.Module) -> None:
    """Give each streaming module its dotted path, the prefix of its state keys."""
    for path, module in root.named_modules():
        if isinstance(module, (StreamingConv1d, StreamingConvTranspose1d)):
            module.name = path
