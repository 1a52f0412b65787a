"""The PyTorch HiFi-GAN read from the ONNX graph must match onnxruntime's decoder."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import pytest
import torch

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import onnx
import onnxruntime  # type: ignore[import-untyped]
from onnx import TensorProto, helper, numpy_helper

from polyvox.models.piper.hifigan import HiFiGan, onnx_decoder_error, read_layout
from polyvox.models.piper.onnx_graph import GraphSurgeryError, VitsGraph, subgraph

RelativeError = Callable[[torch.Tensor, torch.Tensor], float]


@pytest.fixture(scope="module")
def joe_hifigan(joe_graph: VitsGraph) -> HiFiGan:
    return HiFiGan.from_vits(joe_graph).eval()


def test_joe_layout(joe_graph: VitsGraph, joe_hifigan: HiFiGan) -> None:
    layout = read_layout(joe_graph)
    assert [stage.upsample.stride for stage in layout.stages] == [8, 8, 4]
    assert [len(stage.resblocks) for stage in layout.stages] == [3, 3, 3]
    # Piper medium voices use one-conv residual units (VITS ResBlock2).
    assert {len(unit) for s in layout.stages for b in s.resblocks for unit in b} == {1}
    assert (joe_hifigan.hop_length, joe_hifigan.num_channels) == (256, 192)
    assert sum(w.numel() for w in joe_hifigan.buffers()) == 1_662_976


def test_batched_hifigan_equals_onnxruntime(
    joe_graph: VitsGraph, joe_hifigan: HiFiGan, relative_error: RelativeError
) -> None:
    session = onnxruntime.InferenceSession(
        subgraph(joe_graph, [joe_graph.latent], [joe_graph.audio]).SerializeToString(),
        providers=["CPUExecutionProvider"],
    )
    latents = torch.randn(3, 192, 30, generator=torch.Generator().manual_seed(0))  # [B, C, T]
    with torch.no_grad():
        audio = joe_hifigan(latents)  # [B, T * 256]
    assert audio.shape == (3, 30 * 256)
    for row in range(3):
        (expected,) = session.run(None, {joe_graph.latent: latents[row : row + 1].numpy()})
        error = relative_error(audio[row], torch.from_numpy(expected).reshape(-1))
        print(f"PyTorch HiFi-GAN vs onnxruntime, batch row {row}: {error:.2e}")
        assert error <= 1e-4


def test_perturbed_weight_breaks_parity(joe_graph: VitsGraph, joe_hifigan: HiFiGan) -> None:
    assert onnx_decoder_error(joe_hifigan, joe_graph) <= 1e-4
    broken = copy.deepcopy(joe_hifigan)
    layer = broken.layout.stages[-1].resblocks[1][0][0]
    weight = getattr(broken, broken.names[layer.weight])
    weight.add_(0.01 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)))
    assert onnx_decoder_error(broken, joe_graph) > 1e-3


# A small decoder graph of the other Piper flavour: two-conv residual units (ResBlock1,
# high-quality voices), upsampling x2 then x3, laid out node by node as torch.onnx does.


def _synthetic_decoder(skip_relu_at: int | None = None) -> VitsGraph:
    rng = np.random.default_rng(0)
    nodes: list[onnx.NodeProto] = []
    weights: list[onnx.TensorProto] = []
    counter = iter(range(10_000))

    def tensor(prefix: str) -> str:
        return f"{prefix}_{next(counter)}"

    def conv(x: str, c_in: int, c_out: int, k: int, dilation: int = 1, bias: bool = True) -> str:
        name, out = tensor("w"), tensor("conv")
        w = 0.3 * rng.standard_normal((c_out, c_in, k))
        weights.append(numpy_helper.from_array(w.astype(np.float32), name))
        inputs = [x, name]
        if bias:
            inputs.append(tensor("b"))
            b = 0.1 * rng.standard_normal(c_out)
            weights.append(numpy_helper.from_array(b.astype(np.float32), inputs[-1]))
        pad = dilation * (k - 1) // 2
        nodes.append(
            helper.make_node(
                "Conv", inputs, [out], kernel_shape=[k], dilations=[dilation], pads=[pad, pad]
            )
        )
        return out

    def relu(x: str, slope: float = 0.1) -> str:
        out = tensor("relu")
        nodes.append(helper.make_node("LeakyRelu", [x], [out], alpha=slope))
        return out

    def binary(op: str, a: str, b: str) -> str:
        out = tensor(op.lower())
        nodes.append(helper.make_node(op, [a, b], [out]))
        return out

    convs_seen = 0

    def relu_conv(x: str, channels: int, kernel: int, dilation: int) -> str:
        nonlocal convs_seen
        convs_seen += 1
        source = x if convs_seen == skip_relu_at else relu(x)
        return conv(source, channels, channels, kernel, dilation)

    x = conv("z", 6, 8, 7)
    channels = 8
    for stride, kernel_size in ((2, 4), (3, 5)):  # (T - 1) * s - 2 + k = T * s
        name, up = tensor("w"), tensor("up")
        shape = (channels, channels // 2, kernel_size)
        weights.append(
            numpy_helper.from_array((0.3 * rng.standard_normal(shape)).astype(np.float32), name)
        )
        nodes.append(
            helper.make_node(
                "ConvTranspose",
                [relu(x), name],
                [up],
                kernel_shape=[kernel_size],
                strides=[stride],
                pads=[1, 1],
            )
        )
        channels //= 2
        total = ""
        for kernel in (3, 5):
            y = up
            for dilation in (1, 3):
                h = relu_conv(y, channels, kernel, dilation)
                h = relu_conv(h, channels, kernel, 1)
                y = binary("Add", h, y)
            total = binary("Add", total, y) if total else y
        weights.append(numpy_helper.from_array(np.asarray(2.0, np.float32), tensor("two")))
        x = binary("Div", total, weights[-1].name)
    x = conv(relu(x, 0.01), channels, 1, 7, bias=False)
    nodes.append(helper.make_node("Tanh", [x], ["audio"]))
    graph = helper.make_graph(
        nodes,
        "decoder",
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 6, "frames"])],
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", 1, "samples"])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    inferred = onnx.shape_inference.infer_shapes(model).graph
    infos = {v.name: v for v in [*inferred.value_info, *inferred.input, *inferred.output]}
    return VitsGraph(model, "z", "", "", "audio", infos)


def test_two_conv_residual_units_match_onnxruntime() -> None:
    graph = _synthetic_decoder()
    layout = read_layout(graph)
    assert [s.upsample.stride for s in layout.stages] == [2, 3]
    assert {len(unit) for s in layout.stages for b in s.resblocks for unit in b} == {2}
    hifigan = HiFiGan.from_vits(graph)
    assert hifigan.hop_length == 6
    assert onnx_decoder_error(hifigan, graph, num_frames=20) <= 1e-5


def test_unrecognized_wiring_fails_loudly() -> None:
    with pytest.raises(GraphSurgeryError, match="not preceded by a LeakyRelu"):
        read_layout(_synthetic_decoder(skip_relu_at=3))
    graph = _synthetic_decoder()
    upsample = next(n for n in graph.model.graph.node if n.op_type == "ConvTranspose")
    upsample.attribute.append(helper.make_attribute("output_padding", [1]))
    with pytest.raises(GraphSurgeryError, match="output_padding"):
        read_layout(graph)
