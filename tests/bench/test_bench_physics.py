"""The FLOP counter against torch's own count of the real modules, and the ceilings'
plumbing (their figures are benchmarks: no timing is asserted here)."""

from __future__ import annotations

import pytest
import torch

from polyvox.bench.ceilings import gemv_ceiling, matmul_ceiling, measure_ceilings
from polyvox.bench.physics import (
    efficiency,
    flow_lm_step_flops,
    mimi_frame_flops,
    pocket_flops_per_audio_second,
    prefill_flops_per_token,
    realtime_stream_limit,
    torch_flop_count,
)
from polyvox.models.layers.attention import ContiguousKV
from polyvox.models.pocket.config import PocketConfig
from polyvox.models.pocket.loader import get_config
from polyvox.models.pocket.model import PocketModules
from polyvox.models.pocket.weights import random_init

PRESETS = ["english", "english_2m", "english_7m"]  # lsd / pointwise / drifting, GQA, z_dim


@pytest.fixture(scope="module", params=PRESETS)
def model(request: pytest.FixtureRequest) -> tuple[PocketConfig, PocketModules]:
    config = get_config(request.param)
    modules = PocketModules(config)
    random_init(modules, seed=0)
    return config, modules.eval()


def _context(modules: PocketModules, length: int) -> ContiguousKV:
    """A KV store already holding `length` random conditioning positions."""
    flow_lm = modules.flow_lm
    backbone = flow_lm.config.transformer
    kv = ContiguousKV(backbone.num_layers, backbone.kv_heads, backbone.head_dim,
                      torch.float32, torch.device("cpu"))
    with torch.no_grad():
        flow_lm.prefill(torch.randn(1, length, backbone.d_model), kv.next_positions(length), kv)
    kv.commit()
    return kv


@pytest.mark.parametrize("sampler_steps", [1, 3])
def test_flow_lm_step_count(model: tuple[PocketConfig, PocketModules],
                            sampler_steps: int) -> None:
    config, modules = model
    context = 120
    kv = _context(modules, context - 1)  # the step's own token makes `context` keys
    latent, noise = torch.randn(1, config.latent_dim), torch.randn(1, config.latent_dim)
    measured = torch_flop_count(lambda: modules.flow_lm.step(
        latent, kv.next_positions(1)[:, 0], kv, noise, sampler_steps))
    counted = sum(flow_lm_step_flops(config, context, sampler_steps).values())
    assert measured == pytest.approx(counted, rel=0.10)


def test_prefill_count(model: tuple[PocketConfig, PocketModules]) -> None:
    config, modules = model
    kv = _context(modules, 40)
    tokens = torch.randint(0, config.flow_lm.lookup_table.n_bins, (10,))

    def prefill() -> None:
        embeddings = modules.flow_lm.embed_text(tokens)[None]
        modules.flow_lm.prefill(embeddings, kv.next_positions(10), kv)

    # the 10 tokens are attended to with all 50 keys (causality is a mask)
    assert torch_flop_count(prefill) == pytest.approx(
        10 * prefill_flops_per_token(config, context=50), rel=0.10)


def test_mimi_frame_count(model: tuple[PocketConfig, PocketModules]) -> None:
    config, modules = model
    mimi = modules.mimi
    state = mimi.new_decoder_state(1)
    with torch.no_grad():
        mimi.decode(torch.randn(1, 4, config.latent_dim), state)  # past the first frames
    frames = 3
    measured = sum(
        torch_flop_count(lambda: mimi.decode(torch.randn(1, 1, config.latent_dim), state))
        for _ in range(frames)
    )
    counted = frames * sum(mimi_frame_flops(config).values())
    assert measured == pytest.approx(counted, rel=0.10)


def test_english_matches_the_pocket_tts_measurement() -> None:
    """pocket-tts' own modules cost ~2.1 GFLOP (FlowLM) + ~6.6 (Mimi) per audio second."""
    flops = pocket_flops_per_audio_second(get_config("english"))
    assert flops["flow_lm"] == pytest.approx(2.1e9, rel=0.10)
    assert flops["mimi"] == pytest.approx(6.6e9, rel=0.10)
    assert flops["total"] == flops["flow_lm"] + flops["mimi"]


def test_prefill_and_sampler_steps_add_cost() -> None:
    config = get_config("english")
    base = pocket_flops_per_audio_second(config)["flow_lm"]
    assert pocket_flops_per_audio_second(config, sampler_steps=4)["flow_lm"] > base
    assert pocket_flops_per_audio_second(config, text_tokens_per_second=3)["flow_lm"] > base


def test_efficiency_and_stream_limit() -> None:
    assert efficiency(60e9, ceiling_gflops=120) == 0.5
    assert realtime_stream_limit(8e9, ceiling_gflops=120) == 15


def test_ceilings_run_and_restore_threads() -> None:
    threads = torch.get_num_threads()
    assert matmul_ceiling(1, size=256, repeats=1) > 0
    assert gemv_ceiling(1, rows=16, size=512, repeats=1) > 0
    ceilings = measure_ceilings(1, repeats=1, weight_size=512)
    assert ceilings.threads == 1 and ceilings.weight_bandwidth_gbs > 0
    assert set(ceilings.to_dict()) >= {"matmul_gflops", "gemm16_gflops", "gemv_gflops",
                                       "float32_matmul_precision"}
    assert list(ceilings.matmul_gflops) == ["float32"]
    assert ceilings.cuda_matmul_tf32 is None  # a CPU run
    both = measure_ceilings(1, ("bfloat16", "float32", "bfloat16"), repeats=1,
                            weight_size=512)
    assert list(both.matmul_gflops) == ["bfloat16", "float32"]  # each precision once
    assert both.ceiling_gflops("bfloat16") == both.matmul_gflops["bfloat16"] > 0
    with pytest.raises(ValueError, match="no float16 matmul ceiling"):
        both.ceiling_gflops("float16")  # never divided by another precision's ceiling
    assert torch.get_num_threads() == threads
