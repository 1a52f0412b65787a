"""The Piper HiFi-GAN decoder in PyTorch, with weights read from the voice's ONNX graph.

    z [B, C, T] -> conv_pre -> { LeakyReLU -> ConvTranspose (x r_i) -> mean of K resblocks }
               -> LeakyReLU(0.01) -> conv_post -> tanh -> audio [B, T * prod(r_i)]

Each resblock is a chain of residual units `x = x + f(x)`; a unit is one dilated conv
(VITS "ResBlock2", Piper medium voices) or two (ResBlock1, high-quality voices), each
conv preceded by a LeakyReLU. The layout (strides, kernels, dilations, paddings, slopes,
which conv belongs to which unit) is read from the graph's wiring, not from node names,
and every decoder weight must be used exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
import torch
import torch.nn.functional as F
from onnx import helper
from torch import nn

from polyvox.models.piper.onnx_graph import GraphSurgeryError, VitsGraph, subgraph


@dataclass(frozen=True)
class ConvLayer:
    """One Conv/ConvTranspose node: where its weights live and how it slides."""

    weight: str  # initializer name, [C_out, C_in, K] (ConvTranspose: [C_in, C_out, K])
    bias: str | None
    is_transposed: bool
    stride: int
    dilation: int
    padding: int


@dataclass(frozen=True)
class Stage:
    """One upsampling stage: ConvTranspose, then the mean of its resblocks."""

    upsample: ConvLayer
    resblocks: tuple[tuple[tuple[ConvLayer, ...], ...], ...]  # [block][unit][conv]


@dataclass(frozen=True)
class HiFiGanLayout:
    """The decoder's architecture as read from the graph (weights referenced by name)."""

    conv_pre: ConvLayer
    stages: tuple[Stage, ...]
    conv_post: ConvLayer
    slope: float  # LeakyReLU slope inside the network
    post_slope: float  # LeakyReLU slope before conv_post


class HiFiGan(nn.Module):
    """Batched HiFi-GAN: [B, C, T] latents -> [B, T * hop_length] samples."""

    # NOTE: on CPU a call runs ~1.5-2x faster per frame while its input stays under ~300
    # frames (the activations fit the cache): callers split bigger batches into calls of
    # at most this many frames (rows x window).
    CALL_FRAMES = 320

    def __init__(self, layout: HiFiGanLayout, weights: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.layout = layout
        # NOTE: ONNX initializer names contain dots, which nn.Module names cannot.
        self.names = {name: f"w{i}" for i, name in enumerate(sorted(weights))}
        for name, tensor in weights.items():
            self.register_buffer(self.names[name], tensor.float().contiguous())
        self.hop_length = 1  # PCM samples per latent frame
        for stage in layout.stages:
            self.hop_length *= stage.upsample.stride
        self.num_channels = int(weights[layout.conv_pre.weight].shape[1])  # C of z

    @property
    def device(self) -> torch.device:
        """Where the weights live (inputs are moved there by the callers)."""
        return next(iter(self.buffers())).device

    def forward(self, latents: torch.Tensor) -> torch.Tensor:  # [B, C, T] -> [B, T * hop]
        layout = self.layout
        x = self._conv(layout.conv_pre, latents)  # [B, C0, T]
        for stage in layout.stages:
            x = self._conv(stage.upsample, F.leaky_relu(x, layout.slope))  # [B, C_i, T * r]
            total = None
            for block in stage.resblocks:
                y = x
                for unit in block:
                    h = y
                    for conv in unit:
                        h = self._conv(conv, F.leaky_relu(h, layout.slope))
                    y = y + h
                total = y if total is None else total + y
            assert total is not None
            x = total / len(stage.resblocks)
        x = self._conv(layout.conv_post, F.leaky_relu(x, layout.post_slope))  # [B, 1, T * hop]
        return torch.tanh(x)[:, 0].float()

    def lower_precision(self, dtype: torch.dtype) -> None:
        """Keep the weights in `dtype` (bfloat16/float16, for GPUs) and run the convolutions
        in it; audio still comes out float32."""
        for name, tensor in self.named_buffers():
            setattr(self, name, tensor.to(dtype))

    def _conv(self, layer: ConvLayer, x: torch.Tensor) -> torch.Tensor:
        weight = getattr(self, self.names[layer.weight])
        bias = getattr(self, self.names[layer.bias]) if layer.bias else None
        x = x.to(weight.dtype)
        if layer.is_transposed:
            return F.conv_transpose1d(x, weight, bias, layer.stride, layer.padding)
        return F.conv1d(x, weight, bias, layer.stride, layer.padding, layer.dilation)

    @staticmethod
    def from_vits(vits: VitsGraph) -> HiFiGan:
        """Read the decoder's layout and weights from a Piper graph."""
        layout = read_layout(vits)
        names = {n for layer in _all_layers(layout) for n in (layer.weight, layer.bias) if n}
        weights = {name: torch.from_numpy(vits.initializer(name).copy()) for name in names}
        return HiFiGan(layout, weights)


def onnx_decoder_error(
    hifigan: HiFiGan, vits: VitsGraph, num_frames: int = 24, seed: int = 0
) -> float:
    """max|torch - onnxruntime| / max|onnxruntime| of the decoder on random z [1, C, T]."""
    import onnxruntime  # type: ignore[import-untyped]

    session = onnxruntime.InferenceSession(
        subgraph(vits, [vits.latent], [vits.audio]).SerializeToString(),
        providers=["CPUExecutionProvider"],
    )
    channels = hifigan.num_channels
    generator = torch.Generator().manual_seed(seed)
    latents = torch.randn(1, channels, num_frames, generator=generator)  # [1, C, T]
    (expected,) = session.run(None, {vits.latent: latents.numpy()})
    expected_audio = torch.from_numpy(expected).reshape(1, -1)  # [1, T * hop]
    with torch.no_grad():
        audio = hifigan(latents.to(hifigan.device)).cpu()  # [1, T * hop]
    if audio.shape != expected_audio.shape:
        raise GraphSurgeryError(
            f"HiFi-GAN output shape {tuple(audio.shape)} != onnxruntime's "
            f"{tuple(expected_audio.shape)}."
        )
    return float((audio - expected_audio).abs().max() / expected_audio.abs().max())


def _all_layers(layout: HiFiGanLayout) -> list[ConvLayer]:
    layers = [layout.conv_pre, layout.conv_post]
    for stage in layout.stages:
        layers.append(stage.upsample)
        layers.extend(conv for block in stage.resblocks for unit in block for conv in unit)
    return layers


def read_layout(vits: VitsGraph) -> HiFiGanLayout:
    """Walk the decoder nodes (z -> audio) in graph order and recover the layout."""
    return _LayoutReader(vits).read()


class _LayoutReader:
    def __init__(self, vits: VitsGraph) -> None:
        graph = vits.model.graph
        self.latent = vits.latent
        self.initializers = {t.name for t in graph.initializer}
        self.producer = {name: node for node in graph.node for name in node.output}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        tainted = {vits.latent}
        self.decoder: list[onnx.NodeProto] = []  # nodes downstream of z, in graph order
        for node in graph.node:
            if any(name in tainted for name in node.input):
                tainted.update(node.output)
                self.decoder.append(node)

    def read(self) -> HiFiGanLayout:
        convs = [n for n in self.decoder if n.op_type in ("Conv", "ConvTranspose")]
        if len(convs) < 3 or convs[0].op_type != "Conv" or convs[0].input[0] != self.latent:
            raise _error("conv_pre must be the first conv and read z")
        slopes: set[float] = set()
        stages: list[tuple[ConvLayer, str, list[list[list[ConvLayer]]]]] = []
        unit_source = ""  # the residual input x of the unit being read
        for node in convs[1:-1]:
            source, slope = self._leaky_input(node)
            slopes.add(slope)
            layer = self._conv_layer(node)
            if node.op_type == "ConvTranspose":
                stages.append((layer, node.output[0], []))
                continue
            if not stages:
                raise _error(f"{node.name} comes before the first upsampling layer")
            _, stage_input, blocks = stages[-1]
            if source == stage_input:  # a resblock starts from the upsampled signal
                blocks.append([[layer]])
                unit_source = source
            elif blocks and self.producer[source].op_type == "Conv":  # 2nd conv of a unit
                blocks[-1][-1].append(layer)
            elif blocks and self.producer[source].op_type == "Add":  # next residual unit
                blocks[-1].append([layer])
                unit_source = source
            else:
                raise _error(f"{node.name} reads neither the stage input nor a residual sum")
            self._check_residual(node, unit_source)
        # NOTE: how the resblocks merge (sum / K) is not read; the parity check covers it.
        _, post_slope = self._leaky_input(convs[-1])
        if not stages or any(not blocks for *_, blocks in stages) or len(slopes) != 1:
            raise _error(f"{len(stages)} upsampling stages, LeakyReLU slopes {sorted(slopes)}")
        if not any(n.op_type == "Tanh" and n.input[0] == convs[-1].output[0] for n in self.decoder):
            raise _error("conv_post must feed a Tanh")
        layout = HiFiGanLayout(
            conv_pre=self._conv_layer(convs[0]),
            stages=tuple(
                Stage(up, tuple(tuple(tuple(unit) for unit in block) for block in blocks))
                for up, _, blocks in stages
            ),
            conv_post=self._conv_layer(convs[-1]),
            slope=slopes.pop(),
            post_slope=post_slope,
        )
        self._check_weights(layout)
        return layout

    def _conv_layer(self, node: onnx.NodeProto) -> ConvLayer:
        a = {attr.name: helper.get_attribute_value(attr) for attr in node.attribute}
        pads = list(a.get("pads", [0, 0]))
        weight = node.input[1]
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if pads[0] != pads[-1] or a.get("group", 1) != 1 or any(a.get("output_padding", [])):
            raise _error(f"{node.name}: asymmetric pads, groups or output_padding ({a})")
        if weight not in self.initializers or (bias and bias not in self.initializers):
            raise _error(f"{node.name} reads weights that are not initializers")
        return ConvLayer(
            weight=weight,
            bias=bias,
            is_transposed=node.op_type == "ConvTranspose",
            stride=int(a.get("strides", [1])[0]),
            dilation=int(a.get("dilations", [1])[0]),
            padding=int(pads[0]),
        )

    def _leaky_input(self, node: onnx.NodeProto) -> tuple[str, float]:
        """What the LeakyReLU in front of a conv reads, and its slope."""
        relu = self.producer.get(node.input[0])
        if relu is None or relu.op_type != "LeakyRelu":
            raise _error(f"{node.name} is not preceded by a LeakyRelu")
        alpha = [helper.get_attribute_value(a) for a in relu.attribute if a.name == "alpha"]
        return relu.input[0], float(alpha[0]) if alpha else 0.01

    def _check_residual(self, node: onnx.NodeProto, unit_source: str) -> None:
        """A conv ends its unit iff its output is added to the unit's input."""
        users = self.consumers.get(node.output[0], [])
        if len(users) == 1 and users[0].op_type == "LeakyRelu":
            return  # the unit continues with another conv
        if len(users) != 1 or users[0].op_type != "Add" or unit_source not in users[0].input:
            raise _error(f"{node.name}'s output is not added to its residual input")

    def _check_weights(self, layout: HiFiGanLayout) -> None:
        used = [name for layer in _all_layers(layout) for name in (layer.weight, layer.bias)]
        used_names = [name for name in used if name]
        in_graph = {
            name
            for node in self.decoder
            if node.op_type in ("Conv", "ConvTranspose")
            for name in node.input
            if name in self.initializers
        }
        if len(used_names) != len(set(used_names)) or set(used_names) != in_graph:
            raise _error("decoder conv weights are not each used exactly once")


def _error(message: str) -> GraphSurgeryError:
    return GraphSurgeryError(f"HiFi-GAN decoder layout not recognized: {message}.")
