"""In-memory surgery on a Piper VITS ONNX graph.

Piper exports the whole VITS inference path (text encoder, stochastic duration predictor,
flow, HiFi-GAN decoder) as one graph with two unseeded `RandomNormalLike` nodes. polyvox
needs the pieces separately and the noise under its control:

    input, input_lengths, scales, duration_noise ─► [front] ─► z ─► [decoder] ─► output
                                 latent_noise ───────┘

Tensors are located by graph structure (op types and wiring), never by the exporter's
node names (`/Mul_7`), which vary between exports. Any surprise raises `GraphSurgeryError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

DURATION_NOISE = "duration_noise"  # [B, 2, T_ids] replaces the duration predictor's noise
LATENT_NOISE = "latent_noise"  # [B, C, T_frames] replaces the prior's noise


class GraphSurgeryError(ValueError):
    """The ONNX graph does not have the structure of a Piper VITS voice."""


@dataclass(frozen=True)
class VitsGraph:
    """A Piper graph with explicit noise inputs and the names of its key tensors."""

    model: onnx.ModelProto  # graph inputs: input, input_lengths, scales (+ sid), 2 noises
    latent: str  # z: the decoder's input [B, C, T_frames]
    latent_noise_template: str  # the tensor whose shape the latent noise takes
    durations: str  # frames per phoneme id, after ceil [B, 1, T_ids]
    audio: str  # the graph's waveform output
    value_infos: Mapping[str, onnx.ValueInfoProto]  # type and shape of every tensor

    def initializer(self, name: str) -> np.ndarray:
        """An initializer (weight) as a numpy array."""
        for tensor in self.model.graph.initializer:
            if tensor.name == name:
                return numpy_helper.to_array(tensor)
        raise GraphSurgeryError(f"The graph has no initializer {name!r}.")


def load_vits_graph(path: str) -> VitsGraph:
    """Load a Piper voice's ONNX file and replace its noise nodes by explicit inputs."""
    from polyvox.startup import startup_part

    with startup_part("files read"):
        model = onnx.load(path)
    graph = model.graph
    ceils = [n for n in graph.node if n.op_type == "Ceil"]
    if len(ceils) != 1 or len(graph.output) != 1:
        raise GraphSurgeryError(
            f"Expected one Ceil node (durations) and one graph output; "
            f"found {len(ceils)} and {len(graph.output)}."
        )
    durations = ceils[0].output[0]
    # NOTE: infer before surgery so the noise inputs inherit the noise nodes' shapes.
    value_infos = _value_infos(model)
    template = _replace_noise_nodes(model, durations, value_infos)
    return VitsGraph(
        model=model,
        latent=_decoder_input(graph),
        latent_noise_template=template,
        durations=durations,
        audio=graph.output[0].name,
        value_infos=value_infos,
    )


def _decoder_input(graph: onnx.GraphProto) -> str:
    """z: the data input of HiFi-GAN's conv_pre, found as Conv -> LeakyRelu -> ConvTranspose.

    The decoder holds the graph's only ConvTranspose nodes (its upsampling layers).
    """
    producer = _producer_index(graph)
    ups = [n for n in graph.node if n.op_type == "ConvTranspose"]
    chain = [ups[0]] if ups else []
    for expected in ("LeakyRelu", "Conv"):
        index = producer.get(chain[-1].input[0]) if chain else None
        if index is None or graph.node[index].op_type != expected:
            raise GraphSurgeryError(
                "Could not find the HiFi-GAN decoder (Conv -> LeakyRelu -> ConvTranspose)."
            )
        chain.append(graph.node[index])
    return str(chain[-1].input[0])


def _replace_noise_nodes(
    model: onnx.ModelProto, durations: str, value_infos: dict[str, onnx.ValueInfoProto]
) -> str:
    """Swap both RandomNormalLike nodes for graph inputs; returns the latent template.

    The duration predictor's noise is the one the durations depend on.
    """
    graph = model.graph
    before_durations = _ancestors(graph, durations, _producer_index(graph))
    roles: dict[str, list[onnx.NodeProto]] = {DURATION_NOISE: [], LATENT_NOISE: []}
    for index, node in enumerate(graph.node):
        if node.op_type == "RandomNormalLike":
            roles[DURATION_NOISE if index in before_durations else LATENT_NOISE].append(node)
    if any(len(nodes) != 1 for nodes in roles.values()):
        found = {role: [n.name for n in nodes] for role, nodes in roles.items()}
        raise GraphSurgeryError(
            f"Expected two RandomNormalLike nodes, one before the durations; found {found}."
        )
    for input_name, (node,) in roles.items():
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if attributes.get("mean", 0.0) != 0.0 or attributes.get("scale", 1.0) != 1.0:
            raise GraphSurgeryError(f"{node.name} is not a standard normal: {attributes}.")
        for consumer in graph.node:
            for i, name in enumerate(consumer.input):
                if name == node.output[0]:
                    consumer.input[i] = input_name
        graph.node.remove(node)
        new_input = onnx.ValueInfoProto()
        new_input.CopyFrom(value_infos[node.output[0]])
        new_input.name = input_name
        value_infos[input_name] = new_input
        graph.input.append(new_input)
    return str(roles[LATENT_NOISE][0].input[0])


def subgraph(vits: VitsGraph, inputs: Iterable[str], outputs: Iterable[str]) -> onnx.ModelProto:
    """The part of the graph that computes `outputs` from `inputs` (and initializers).

    Fails if the outputs need any other graph input or intermediate tensor.
    """
    inputs, outputs = list(inputs), list(outputs)
    model = vits.model
    graph = model.graph
    producer = _producer_index(graph)
    initializers = {t.name: t for t in graph.initializer}
    stop = set(inputs)
    needed: set[int] = set()
    used_initializers: set[str] = set()
    stack = list(outputs)
    while stack:
        name = stack.pop()
        if name in stop or name == "":
            continue
        if name in initializers:
            used_initializers.add(name)
            continue
        if name not in producer:
            raise GraphSurgeryError(f"Tensor {name!r} is needed but not among inputs {inputs}.")
        if producer[name] not in needed:
            needed.add(producer[name])
            stack.extend(graph.node[producer[name]].input)
    nodes = [graph.node[i] for i in sorted(needed)]  # graph order is topological
    # NOTE: inputs keep their inferred shapes (ranks, fixed dims): onnxruntime fuses
    # fewer nodes on tensors of unknown rank, which changes the rounding of z.
    new_graph = helper.make_graph(
        nodes,
        f"{graph.name}_part",
        inputs=[vits.value_infos[n] for n in inputs],
        outputs=[vits.value_infos[n] for n in outputs],
        initializer=[initializers[n] for n in sorted(used_initializers)],
    )
    return helper.make_model(
        new_graph, opset_imports=list(model.opset_import), ir_version=model.ir_version
    )


def noise_dependent_split(vits: VitsGraph) -> tuple[list[str], list[str]]:
    """Tensors crossing from the noise-free part of the front to the latent-noise part.

    Returns (cut, graph_inputs): `cut` are intermediate tensors that the part depending on
    `latent_noise` reads from the rest; `graph_inputs` are graph inputs it reads directly.
    """
    graph = vits.model.graph
    graph_inputs = {i.name for i in graph.input}
    producer = _producer_index(graph)
    front = _ancestors(graph, vits.latent, producer)
    # Front nodes that (transitively) read the latent noise, in topological order.
    tainted: set[str] = {LATENT_NOISE}
    noisy_nodes = []
    for index, node in enumerate(graph.node):
        if index in front and any(name in tainted for name in node.input):
            tainted.update(node.output)
            noisy_nodes.append(node)
    if vits.latent not in tainted:
        raise GraphSurgeryError("The latent z does not depend on the latent noise input.")
    cut, direct = set(), set()
    for node in noisy_nodes:
        for name in node.input:
            if name in tainted or name == "":
                continue
            if name in graph_inputs:
                direct.add(name)
            elif name in producer:
                cut.add(name)
    direct.discard(LATENT_NOISE)
    return sorted(cut), sorted(direct)


def _producer_index(graph: onnx.GraphProto) -> dict[str, int]:
    """Tensor name -> index of the node producing it."""
    return {name: i for i, node in enumerate(graph.node) for name in node.output}


def _ancestors(graph: onnx.GraphProto, tensor: str, producer: Mapping[str, int]) -> set[int]:
    """Indices of the nodes `tensor` depends on (its producer included)."""
    found: set[int] = set()
    stack = [tensor]
    while stack:
        index = producer.get(stack.pop())
        if index is not None and index not in found:
            found.add(index)
            stack.extend(graph.node[index].input)
    return found


def _value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Type and shape of every tensor, by ONNX shape inference; fails if one is unknown."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    infos = {v.name: v for v in [*inferred.value_info, *inferred.input, *inferred.output]}
    for node in model.graph.node:
        for name in node.output:
            if name and not infos.get(name, onnx.ValueInfoProto()).type.tensor_type.elem_type:
                raise GraphSurgeryError(f"Shape inference found no type for {name!r}.")
    return infos
