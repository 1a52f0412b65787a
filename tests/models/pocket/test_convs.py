"""The streaming convolutions against torch's own (the plain reference): offline, and
streamed in chunks of any size with carried state."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from polyvox.models.layers.precision import lower_precision
from polyvox.models.pocket.convs import StreamingConv1d, StreamingConvTranspose1d


def _reference_transposed(module: StreamingConvTranspose1d, x: torch.Tensor) -> torch.Tensor:
    """torch's transposed conv over the whole signal, cut to T * stride samples (the tail
    past the end belongs to frames not yet seen)."""
    conv = module.convtr
    y = F.conv_transpose1d(x, conv.weight.float(), None if conv.bias is None else conv.bias.float(),
                           conv.stride, groups=conv.groups)
    return y[..., : x.shape[-1] * conv.stride[0]]


@pytest.mark.parametrize(("channels_in", "channels_out", "kernel", "stride", "groups"), [
    (12, 8, 8, 4, 1),  # kernel = 2 x stride (Mimi's SEANet)
    (12, 8, 7, 4, 1),  # shorter kernel: zero-padded taps
    (6, 6, 32, 16, 6),  # depthwise (Mimi's x16 upsample)
    (5, 3, 3, 3, 1),  # kernel = stride: no overlap
])
def test_transposed_conv_equals_torch_offline_and_streamed(channels_in, channels_out, kernel,
                                                           stride, groups) -> None:
    torch.manual_seed(0)
    module = StreamingConvTranspose1d(channels_in, channels_out, kernel, stride, groups=groups)
    module.name = "up"
    x = torch.randn(3, channels_in, 17)
    expected = _reference_transposed(module, x)
    torch.testing.assert_close(module(x, None), expected, atol=1e-5, rtol=1e-5)
    state = {"up.prev": torch.zeros(3, *module.state_shapes()["up.prev"])}
    pieces, start = [], 0
    for size in (1, 5, 2, 9):
        pieces.append(module(x[..., start: start + size], state))
        start += size
    torch.testing.assert_close(torch.cat(pieces, -1), expected, atol=1e-5, rtol=1e-5)


def test_transposed_conv_in_bfloat16_stays_close() -> None:
    torch.manual_seed(0)
    module = StreamingConvTranspose1d(16, 8, 8, 4)
    module.name = "up"
    x = torch.randn(2, 16, 10)
    expected = _reference_transposed(module, x)
    lower_precision(module, torch.bfloat16)
    y = module(x, None)
    assert y.dtype == torch.float32
    assert (y - expected).abs().max() < 2e-2 * expected.abs().max()


def test_transposed_conv_rejects_kernels_past_twice_the_stride() -> None:
    with pytest.raises(ValueError, match="2 \\* stride"):
        StreamingConvTranspose1d(4, 4, 9, 4)


def test_conv_equals_torch_streamed() -> None:
    torch.manual_seed(0)
    module = StreamingConv1d(6, 4, 5, dilation=2)
    module.name = "c"
    x = torch.randn(2, 6, 20)
    expected = F.conv1d(F.pad(x, (module.history, 0)), module.conv.weight, module.conv.bias,
                        dilation=2)
    state = {"c.prev": torch.zeros(2, *module.state_shapes()["c.prev"])}
    pieces = [module(x[..., a:b], state) for a, b in ((0, 3), (3, 4), (4, 20))]
    torch.testing.assert_close(torch.cat(pieces, -1), expected, atol=1e-5, rtol=1e-5)
