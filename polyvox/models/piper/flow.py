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


class PiperFlow(nn.Module):
    """The noise-free reverse flow: prior mean [B, C, T] -> z [B, C, T]."""

    def __init__(self, weights: dict[str, tuple[torch.Tensor, torch.Tensor | None]],
                 couplings: list[int], depth: int) -> None:
        super().__init__()
        self.names: dict[str, tuple[str, str | None]] = {}
        for index, (node, (weight, bias)) in enumerate(sorted(weights.items())):
            self.register_buffer(f"w{index}", weight.float().contiguous())
            if bias is not None:
                self.register_buffer(f"b{index}", bias.float().contiguous())
            self.names[node] = (f"w{index}", f"b{index}" if bias is not None else None)
        self.couplings = couplings  # graph indices, in the order inference runs them
        self.depth = depth
        kernel = int(self._weight(couplings[0], "enc/in_layers.0")[0].shape[-1])
        self.reach = depth * (kernel // 2)  # frames either side one coupling reads

    @property
    def context(self) -> int:
        """Frames of prior either side that one frame of z depends on."""
        return self.reach * len(self.couplings)

    @staticmethod
    def from_vits(vits: VitsGraph) -> PiperFlow:
        weights: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
        for node in vits.model.graph.node:
            if node.op_type == "Conv" and _CONV.fullmatch(node.name):
                tensors = [torch.from_numpy(vits.initializer(name).copy())
                           for name in node.input[1:3]]
                weights[node.name] = (tensors[0], tensors[1] if len(tensors) > 1 else None)
        couplings = sorted({int(_CONV.fullmatch(name)[1]) for name in weights}, reverse=True)
        if not couplings:
            raise GraphSurgeryError("no flow coupling layers (/flow/flows.N/...) in the graph")
        depths = {sum(1 for name in weights if name.startswith(f"/flow/flows.{c}/enc/in_"))
                  for c in couplings}
        if len(depths) != 1 or any(f"/flow/flows.{c}/{part}/Conv" not in weights
                                   for c in couplings for part in ("pre", "post")):
            raise GraphSurgeryError("the flow's coupling layers are not all alike: "
                                    "an unknown Piper flow layout")
        return PiperFlow(weights, couplings, depths.pop())

    def lower_precision(self, dtype: torch.dtype) -> None:
        """Weights in `dtype`, the convolutions run in it; z still comes out float32."""
        for name, tensor in self.named_buffers():
            setattr(self, name, tensor.to(dtype))

    def _weight(self, coupling: int, part: str) -> tuple[torch.Tensor, torch.Tensor | None]:
        weight, bias = self.names[f"/flow/flows.{coupling}/{part}/Conv"]
        return getattr(self, weight), getattr(self, bias) if bias else None

    def _conv(self, coupling: int, part: str, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self._weight(coupling, part)
        return F.conv1d(x.to(weight.dtype), weight, bias, padding=weight.shape[-1] // 2)

    def coupling(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """The `index`-th coupling inference runs (flip included) over a window of frames,
        its edges zero-padded: exact `reach` frames in from an edge that is not the
        sentence's."""
        coupling = self.couplings[index]
        x = torch.flip(x, [1])
        half = x.shape[1] // 2
        first, second = x[:, :half], x[:, half:]
        h = self._conv(coupling, "pre", first)
        skip = None
        for layer in range(self.depth):
            gates = self._conv(coupling, f"enc/in_layers.{layer}", h)
            width = gates.shape[1] // 2
            acts = torch.tanh(gates[:, :width]) * torch.sigmoid(gates[:, width:])
            out = self._conv(coupling, f"enc/res_skip_layers.{layer}", acts)
            if layer < self.depth - 1:
                h = h + out[:, :width]
                out = out[:, width:]
            skip = out if skip is None else skip + out
        assert skip is not None
        mean = self._conv(coupling, "post", skip).float()
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
