"""bfloat16 weights for the matmul-bound layers (polyvox/models/layers/precision.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from polyvox.config import EngineConfig
from polyvox.engine.engine import Engine, run_to_completion
from polyvox.models.layers import precision
from polyvox.models.layers.precision import lower_precision, parse_precision
from polyvox.models.pocket.loader import load_pocket
from polyvox.models.pocket.model import GenerationParams
from polyvox.models.registry import load_model

TEXTS = ["Hello world.", "The quick brown fox jumps over the lazy dog.",
         "Another sentence, with a comma, and more words here.", "Good morning."]


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape
    return float((a - b).abs().max() / b.abs().max())


def test_lowered_layers_run_in_bfloat16_and_stay_close() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Conv1d(1, 4, 3), nn.Linear(126, 8))
    x = torch.randn(5, 1, 64)
    with torch.no_grad():
        expected = net(x)
    assert lower_precision(net, torch.bfloat16) == 3
    assert net[0].weight.dtype == torch.bfloat16 and net[2].weight.dtype == torch.bfloat16
    with torch.no_grad():
        out = net(x)
    assert out.dtype == torch.float32  # activations stay float32 around the layers
    assert 0 < rel_error(out, expected) < 2e-2  # changed, but only by bfloat16 rounding
    assert lower_precision(net, torch.bfloat16) == 3  # idempotent: still the same layers


@pytest.mark.skipif(not precision._CAN_PACK, reason="no oneDNN prepacked bf16 linear here")
def test_prepacked_bfloat16_linear_matches_the_plain_one_and_follows_weight_changes() -> None:
    torch.manual_seed(1)
    layer = nn.Linear(96, 160)
    lower_precision(layer, torch.bfloat16)
    x = torch.randn(7, 3, 96)
    plain = nn.functional.linear(x.bfloat16(), layer.weight, layer.bias).float()
    with torch.no_grad():
        packed = layer(x)
    assert layer._packed is not None  # the prepacked path ran
    assert rel_error(packed, plain) < 1e-2  # same products; only the rounding order may differ
    with torch.no_grad():  # an in-place weight update (e.g. load_state_dict) is seen
        layer.weight.mul_(-1)
        flipped = layer(x)
    plain = nn.functional.linear(x.bfloat16(), layer.weight, layer.bias).float()
    assert rel_error(flipped, plain) < 1e-2
    assert "_packed" not in layer.state_dict()  # checkpoints keep the plain weight
    layer.weight.requires_grad_(True)  # training: the differentiable plain path
    out = layer(x)
    out.sum().backward()
    assert layer.weight.grad is not None


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown precision 'half'"):
        parse_precision("half")
    with pytest.raises(ValueError, match="unknown precision"):
        load_model("pocket/english_2m", precision="int4")


def test_joe_ar_in_bfloat16_keeps_every_linear_and_its_decoder_low() -> None:
    """`serve --precision bfloat16` for the default voice: the CPU load path prepacks the
    student's linears after lowering them, and must leave none of them in float32."""
    pytest.importorskip("piper")
    family = load_model("pocket/joe-ar", precision="bfloat16")
    linears = [m for m in family.flow_lm.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) > 10
    assert {m.weight.dtype for m in linears} == {torch.bfloat16}
    assert {b.dtype for b in family.hifigan.buffers()} == {torch.bfloat16}
    assert {b.dtype for b in family.streamed_flow.parameters()} == {torch.bfloat16}


def test_piper_decoder_in_bfloat16_stays_close_to_float32() -> None:
    """Piper's lower precision is its HiFi-GAN's weights (for GPUs); audio stays float32."""
    pytest.importorskip("piper")
    full, half = load_model("piper/joe"), load_model("piper/joe", precision="bfloat16")
    assert all(b.dtype == torch.bfloat16 for b in half.model.hifigan.buffers())
    z = full.clause_latents("Hello there.", full.make_params(seed=3), full.new_generator(3))
    reference = full.model.hifigan(z.t()[None])
    lowered = half.model.hifigan(z.t()[None])
    assert lowered.dtype == torch.float32
    error = float((lowered - reference).abs().max() / reference.abs().max())
    assert 0 < error <= 5e-2


@pytest.fixture(scope="module")
def pair():
    return load_model("pocket/english_2m"), load_model("pocket/english_2m", precision="bfloat16")


def _engine(family) -> Engine:
    engine = Engine(family, EngineConfig(kv_memory_mb=32))
    empty = family.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    return engine


def test_bfloat16_engine_is_close_to_float32_and_batched_equals_single(pair) -> None:
    full, low = pair
    assert any(p.dtype == torch.bfloat16 for p in low.modules.parameters())
    params = [GenerationParams(temperature=0.5, seed=i) for i in range(len(TEXTS))]
    engine = _engine(low)
    for i, text in enumerate(TEXTS):
        engine.add_request(text, "default", params[i], request_id=f"r{i}")
    batched = run_to_completion(engine)
    assert engine.is_idle()
    for i, text in enumerate(TEXTS):
        single = _engine(low)
        single.add_request(text, "default", params[i], request_id="x")
        alone = run_to_completion(single)["x"]
        # NOTE: bfloat16 GEMMs of 1 and of 4 rows may round differently: a few 1e-2 at
        # most, where a stream mixed up with a neighbour would be off by ~100%.
        assert rel_error(batched[f"r{i}"], alone) <= 5e-2
        reference = _engine(full)
        reference.add_request(text, "default", params[i], request_id="x")
        assert rel_error(alone, run_to_completion(reference)["x"]) <= 0.1


def test_prepacked_float32_engine_matches_plain_linears_and_batched_equals_single(pair) -> None:
    """load_model runs a Pocket model's linears on prepacked weights on CPU (PackedLinear);
    the engine's audio stays that of plain nn.Linear layers, batched as one at a time."""
    packed = pair[0]
    plain = load_pocket("english_2m", seed=0)
    if precision._CAN_PACK[torch.float32]:
        assert any(type(m) is precision.PackedLinear for m in packed.modules.modules())
    assert not any(isinstance(m, precision.PackedLinear) for m in plain.modules.modules())
    params = [GenerationParams(temperature=0.5, seed=i) for i in range(len(TEXTS))]
    engine = _engine(packed)
    for i, text in enumerate(TEXTS):
        engine.add_request(text, "default", params[i], request_id=f"r{i}")
    batched = run_to_completion(engine)
    for i, text in enumerate(TEXTS):
        outputs = []
        for family in (packed, plain):
            single = _engine(family)
            single.add_request(text, "default", params[i], request_id="x")
            outputs.append(run_to_completion(single)["x"])
        assert rel_error(batched[f"r{i}"], outputs[0]) <= 1e-4
        assert rel_error(outputs[0], outputs[1]) <= 1e-4


def test_mimi_decoder_in_bfloat16_runs_seanet_in_bfloat16_and_stays_close(pair) -> None:
    full, low = pair
    assert low.mimi.decoder.model[0].conv.weight.dtype == torch.bfloat16
    seen: list[torch.dtype] = []
    hook = low.mimi.decoder.model[1].register_forward_hook(lambda m, a, out: seen.append(out.dtype))
    latents = torch.randn(2, 6, full.mimi.quantizer.output_proj.in_channels,
                          generator=torch.Generator().manual_seed(0)) * 0.5
    try:
        with torch.inference_mode():
            expected = full.mimi.decode(latents, full.mimi.new_decoder_state(2))
            lowered = low.mimi.decode(latents, low.mimi.new_decoder_state(2))
    finally:
        hook.remove()
    assert seen == [torch.bfloat16]  # SEANet's activations (here its first ELU) in bfloat16
    assert lowered.dtype == torch.float32  # audio comes back in float32
    assert 0 < rel_error(lowered, expected) <= 2e-2  # measured 5.6e-3 on pocket/english


def test_compiled_bfloat16_elu_rounds_like_aten_on_every_value() -> None:
    """The Mimi decoder's bfloat16 ELU runs through a compiled kernel: on all 65,536
    bfloat16 values it must give ATen's result, at most one bfloat16 ulp away at a
    rounding boundary, and keep NaN, infinities and signed zeros as ATen does."""
    import torch.nn.functional as F

    from polyvox.models.layers import cpu_kernels
    from polyvox.models.pocket.mimi import ELU

    kernel = cpu_kernels.elu_bf16()
    if kernel is None:
        assert not cpu_kernels.can_build(), "the compiled CPU kernels failed to build (see the log)"
        pytest.skip("no C++ compiler: nn.ELU's path is used")
    values = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    ours, aten = kernel(values.contiguous()), F.elu(values)
    nan = aten.isnan()
    assert torch.equal(ours.isnan(), nan)
    ours_bits = ours[~nan].view(torch.int16).to(torch.int32)
    aten_bits = aten[~nan].view(torch.int16).to(torch.int32)
    assert (ours_bits - aten_bits).abs().max() <= 1
    assert (ours_bits == aten_bits).float().mean() > 0.999
    # The module takes the kernel for bf16 CPU inputs, in any layout, and ATen otherwise.
    x = torch.randn(3, 8, 50).to(torch.bfloat16).transpose(1, 2)
    torch.testing.assert_close(ELU()(x), F.elu(x), rtol=1e-2, atol=1e-2)
    x32 = torch.randn(4, 7)
    assert torch.equal(ELU()(x32), F.elu(x32))
