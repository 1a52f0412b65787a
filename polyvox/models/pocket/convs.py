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
        self.stride = stride
        self.name = ""

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {f"{self.name}.tail": (self.convtr.out_channels, self.overlap)}

    def forward(self, x: torch.Tensor, state: DecoderState | None) -> torch.Tensor:
        # x [B, C_in, T] -> [B, C_out, T * stride]
        key = f"{self.name}.tail"
        stride, batch, steps = self.stride, x.shape[0], x.shape[2]
        contributions = self._per_frame(x)  # [B, T, C_out, 2 * stride]
        head, tail = contributions[..., :stride], contributions[..., stride:]
        # Frame t's output = its own head + the previous frame's tail (overlap-add).
        previous = tail.new_zeros(batch, 1, *tail.shape[2:])
        if state is not None:
            previous[:, 0, :, : self.overlap] = state[key]
        y = head + torch.cat([previous, tail[:, :-1]], dim=1)
        if state is not None:
            state[key] = tail[:, -1, :, : self.overlap].contiguous()
        y = y.permute(0, 2, 1, 3).reshape(batch, -1, steps * stride)
        if self.convtr.bias is not None:
            y = y + self.convtr.bias[:, None].to(y.dtype)
        return y

    def _per_frame(self, x: torch.Tensor) -> torch.Tensor:
        """What each input frame adds to the output: [B, T, C_out, 2 * stride] (the kernel,
        zero-padded to twice the stride). A GEMM (or a broadcast product for depthwise)
        instead of a transposed conv: much faster on CPU."""
        weight = self.convtr.weight  # [C_in, C_out / groups, K]
        kernel = weight.shape[-1]
        if kernel < 2 * self.stride:
            weight = torch.nn.functional.pad(weight, (0, 2 * self.stride - kernel))
        groups = self.convtr.groups
        if groups == 1:
            # NOTE: the weight may be stored in a lower precision (layers/precision.py):
            # the GEMM runs in its dtype, the result comes back in the input's.
            columns = weight.reshape(weight.shape[0], -1)  # [C_in, C_out * 2S]
            out = (x.transpose(1, 2).to(columns.dtype) @ columns).to(x.dtype)  # [B, T, C_out*2S]
            return out.view(x.shape[0], x.shape[2], weight.shape[1], -1)
        if groups == weight.shape[0] and weight.shape[1] == 1:  # depthwise: memory-bound
            return (x.transpose(1, 2)[..., None] * weight[:, 0].to(x.dtype))  # [B, T, C, 2S]
        raise NotImplementedError("grouped transposed convs other than depthwise")


def name_streaming_modules(root: nn.Module) -> None:
    """Give each streaming module its dotted path, the prefix of its state keys."""
    for path, module in root.named_modules():
        if isinstance(module, (StreamingConv1d, StreamingConvTranspose1d)):
            module.name = path
