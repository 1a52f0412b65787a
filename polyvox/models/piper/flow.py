"""The Piper voice's flow in PyTorch, with weights read from its ONNX graph, computed as
a stream: each chunk pays for its new frames, not for the flow's whole reach again.

At inference VITS turns the prior into z by running its flow backwards, noise-free:

    for each coupling layer, last first:  x = flip(x);  x = [a, b - m(a)]

where a and b are the two halves of the channels and m is a WaveNet (a 1x1 conv in, then
dilation-1 gated convolutions of kernel k with residual and skip paths, a 1x1 conv out)
over a. A layer's output at frame t therefore depends on its input over t ± reach, reach
= depth x (k // 2): 8 frames for Piper's medium voices, and z on the prior over ± 4 x 8
(front.FLOW_CONTEXT). Edges are zero-padded per convolution, as for a whole sentence.

`PiperFlow.stream` computes a clause in windows: each layer keeps the last 2 x reach
frames of its input, and a window computes each layer's output only where it became
final (its input known `reach` frames past it), with the sentence's own edges at the
clause's start and, once the window reaches it, its end. So a chunk of n new frames
costs each layer n + 2 x reach frames of work, where recomputing the window from the
prior costs n + 2 x (4 x reach + the vocoder's context). The result equals the whole
clause's flow (tests/models/piper/test_flow.py, and the windowed decoding test of
tests/train/test_student_family.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from polyvox.models.piper.onnx_graph import GraphSurgeryError, VitsGraph

_CONV = re.compile(
    r"/flow/flows\.(\d+)/(pre|post|enc/in_layers\.\d+|enc/res_skip_layers\.\d+)/Conv")


@dataclass(frozen=True)
class FlowWindow:
    """Where a window stands in its clause: `first` it starts at the clause's start (no
    cache yet), `last` it ends at the clause's end."""

    first: bool
    last: bool


class _Coupling(nn.Module):
    """One coupling layer's convolutions: `pre` (1x1, half the channels in), the WaveNet's
    gated `gates` and `outputs` (residual and skip halves; the last only skip), `post`."""

    def __init__(self, convs: dict[str, nn.Conv1d], depth: int) -> None:
        super().__init__()
        self.pre, self.post = convs["pre"], convs["post"]
        self.gates = nn.ModuleList(convs[f"enc/in_layers.{i}"] for i in range(depth))
        self.outputs = nn.ModuleList(convs[f"enc/res_skip_layers.{i}"] for i in range(depth))


def _conv(layer: nn.Conv1d, x: torch.Tensor) -> torch.Tensor:
    """The layer in its weights' dtype (bfloat16 after `lower_precision`), zero-padded.
    NOTE: F.conv1d, not the module's call: a streamed window is ~40 small convolutions,
    and the module call's own overhead showed in a 1-row window's time."""
    return F.conv1d(x.to(layer.weight.dtype), layer.weight, layer.bias,
                    padding=layer.padding)


class PiperFlow(nn.Module):
    """The noise-free reverse flow: prior mean [B, C, T] -> z [B, C, T]."""

    def __init__(self, couplings: list[_Coupling]) -> None:
        super().__init__()
        self.couplings = nn.ModuleList(couplings)  # in the order inference runs them
        self.depth = len(couplings[0].gates)
        kernel = couplings[0].gates[0].kernel_size[0]
        self.reach = self.depth * (kernel // 2)  # frames either side one coupling reads

    @property
    def context(self) -> int:
        """Frames of prior either side that one frame of z depends on."""
        return self.reach * len(self.couplings)

    @staticmethod
    def from_vits(vits: VitsGraph) -> PiperFlow:
        layers: dict[int, dict[str, nn.Conv1d]] = {}
        for node in vits.model.graph.node:
            named = _CONV.fullmatch(node.name) if node.op_type == "Conv" else None
            if named is None:
                continue
            weight, *bias = (torch.from_numpy(vits.initializer(name).copy()).float()
                             for name in node.input[1:3])
            out_channels, in_channels, kernel = weight.shape
            conv = nn.Conv1d(in_channels, out_channels, kernel, padding=kernel // 2,
                             bias=bool(bias))
            conv.weight.data = weight
            if bias:
                conv.bias.data = bias[0]
            layers.setdefault(int(named[1]), {})[named[2]] = conv
        if not layers:
            raise GraphSurgeryError("no flow coupling layers (/flow/flows.N/...) in the graph")
        depths = {sum(name.startswith("enc/in_layers") for name in convs)
                  for convs in layers.values()}
        depth = depths.pop()
        if depths or any({"pre", "post"} - set(convs) for convs in layers.values()):
            raise GraphSurgeryError("the flow's coupling layers are not all alike: "
                                    "an unknown Piper flow layout")
        flow = PiperFlow([_Coupling(layers[index], depth)
                          for index in sorted(layers, reverse=True)])
        return flow.requires_grad_(False)  # inference only

    def lower_precision(self, dtype: torch.dtype) -> None:
        """Weights in `dtype`, the convolutions run in it; z still comes out float32."""
        self.to(dtype)

    def coupling(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """The `index`-th coupling inference runs (flip included) over a window of frames,
        its edges zero-padded: exact `reach` frames in from an edge that is not the
        sentence's."""
        layer = self.couplings[index]
        x = torch.flip(x, [1])
        half = x.shape[1] // 2
        first, second = x[:, :half], x[:, half:]
        h = _conv(layer.pre, first)
        skip = None
        for depth, (gates_conv, outputs_conv) in enumerate(zip(layer.gates, layer.outputs)):
            gates = _conv(gates_conv, h)
            width = gates.shape[1] // 2
            acts = torch.tanh(gates[:, :width]) * torch.sigmoid(gates[:, width:])
            out = _conv(outputs_conv, acts)
            if depth < self.depth - 1:
                h = h + out[:, :width]
                out = out[:, width:]
            skip = out if skip is None else skip + out
        assert skip is not None
        mean = _conv(layer.post, skip).float()
        return torch.cat([first, second - mean], 1)

    def forward(self, prior: torch.Tensor) -> torch.Tensor:  # [B, C, T] -> [B, C, T]
        x = prior.float()
        for index in range(len(self.couplings)):
            x = self.coupling(index, x)
        return x

    def stream(self, prior: torch.Tensor, caches: list[torch.Tensor], where: FlowWindow
               ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One window of a clause. `prior` [B, C, T]: from 2 x reach frames before where the
        first coupling's output stops being final (the clause's start when `where.first`)
        to the last prior frame known. `caches`: per later coupling, the last 2 x reach
        frames of its input from the window before (ignored when first). Returns z from
        where it stopped being final to where it is now ([B, C, T - context] unless the
        window is the clause's last, then to its end) and the caches for the next one."""
        cut_left = 0 if where.first else self.reach
        cut_right = 0 if where.last else self.reach
        keep = 2 * self.reach
        x, kept = prior.float(), []
        for index in range(len(self.couplings)):
            if index and not where.first:
                x = torch.cat([caches[index - 1], x], 2)
            if index:
                kept.append(x[:, :, -keep:])
            out = self.coupling(index, x)
            x = out[:, :, cut_left: out.shape[2] - cut_right]
        return x, kept
