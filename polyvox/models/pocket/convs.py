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
from torch import nn

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
            previous = state[f"{self.name}.prev"]
        x = torch.cat([previous, x], dim=-1)
        if state is not None:
            state[f"{self.name}.prev"] = x[..., -self.history:]
        return self.conv(x)


class StreamingConvTranspose1d(nn.Module):
    """ConvTranspose1d whose overlapping tail (kernel - stride samples) is held back and
    added to the next call's head: state `<name>.tail` [C_out, kernel - stride]."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 groups: int = 1, bias: bool = True) -> None:
        super().__init__()
        if kernel_size > 2 * stride:
            raise ValueError("streaming transposed conv needs kernel_size <= 2 * stride")
        self.convtr = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride,
                                         groups=groups, bias=bias)
        self.overlap = kernel_size - stride
        self.name = ""

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {f"{self.name}.tail": (self.convtr.out_channels, self.overlap)}

    def forward(self, x: torch.Tensor, state: DecoderState | None) -> torch.Tensor:
        # x [B, C_in, T] -> [B, C_out, T * stride]
        y = self.convtr(x)
        if self.overlap <= 0:
            return y
        key = f"{self.name}.tail"
        tail = state[key] if state is not None else y.new_zeros(y.shape[0], y.shape[1], self.overlap)
        head = y[..., : self.overlap] + tail
        new_tail = y[..., -self.overlap:]
        if self.convtr.bias is not None:
            # The bias is added once per output sample: the next call adds it again.
            new_tail = new_tail - self.convtr.bias[:, None]
        if state is not None:
            state[key] = new_tail
        return torch.cat([head, y[..., self.overlap: -self.overlap]], dim=-1)


def name_streaming_modules(root: nn.Module) -> None:
    """Give each streaming module its dotted path, the prefix of its state keys."""
    for path, module in root.named_modules():
        if isinstance(module, (StreamingConv1d, StreamingConvTranspose1d)):
            module.name = path
