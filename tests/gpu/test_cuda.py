"""The engine on a GPU: captured CUDA graphs equal eager runs, batched equals one at a time,
streamed equals offline, the overlapped loop equals the plain one."""

from __future__ import annotations

import pytest
import torch

from polyvox.config import EngineConfig
from polyvox.engine.engine import Engine, run_to_completion
from polyvox.models.registry import load_model

TEXTS = ["Hello world.", "The quick brown fox jumps over the lazy dog.",
         "Is this a question? Yes, it is one.", "Good morning, and welcome back.",
         "Numbers like three and four are words here.", "Short one!"]


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, f"shape {tuple(a.shape)} != {tuple(b.shape)}"
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def pocket(precision: str = "float32"):  # type: ignore[no-untyped-def]
    return load_model("pocket/english_2m", seed=0, device="cuda", precision=precision)


def run(family, texts, warm_up: bool = False,  # type: ignore[no-untyped-def]
        **config) -> dict[str, torch.Tensor]:
    engine = Engine(family, EngineConfig(**({"kv_memory_mb": 256} | config)), device="cuda")
    empty = family.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    if warm_up:  # every graph captured up front, as `polyvox serve` does
        engine.warm_up()
        shapes = len(engine.runner.step_graphs.calls)
    for i, text in enumerate(texts):
        engine.add_request(text, "default", family.make_params(seed=i, temperature=0.5),
                           request_id=f"r{i}")
    out = run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()
    if warm_up:
        assert len(engine.runner.step_graphs.calls) == shapes  # nothing captured late
    return out


@pytest.mark.parametrize("precision,tolerance", [("float32", 1e-4), ("bfloat16", 1e-2)])
def test_captured_graphs_equal_eager(precision, tolerance) -> None:
    family = pocket(precision)
    eager = run(family, TEXTS, graphs="off")
    captured = run(family, TEXTS, graphs="cuda")
    for rid, audio in eager.items():
        assert rel_error(captured[rid], audio) <= tolerance, rid


def test_batched_equals_one_at_a_time() -> None:
    family = pocket()
    alone = run(family, TEXTS, schedule="sequential", graphs="off")
    batched = run(family, TEXTS, warm_up=True, graphs="cuda", overlap=True)
    for rid, audio in alone.items():
        assert rel_error(batched[rid], audio) <= 1e-4, rid


def test_overlapped_loop_equals_plain_loop() -> None:
    family = pocket()
    eos = {"eos_threshold": -2.5, "frames_after_eos": 0}
    outputs = []
    for overlap in (False, True):
        engine = Engine(family, EngineConfig(kv_memory_mb=256, graphs="cuda", overlap=overlap),
                        device="cuda")
        empty = family.empty_voice()
        engine.register_voice("default", empty.k, empty.v)
        for i, text in enumerate(TEXTS):
            params = family.make_params(seed=i, temperature=0.5)
            params = type(params)(**(vars(params) | eos))
            engine.add_request(text + " " + text, "default", params, request_id=f"r{i}")
        outputs.append(run_to_completion(engine))
    for rid, audio in outputs[0].items():
        assert rel_error(outputs[1][rid], audio) <= 1e-4, rid


def test_streamed_equals_offline() -> None:
    family = pocket()
    engine = Engine(family, EngineConfig(kv_memory_mb=256, graphs="cuda", overlap=True,
                                         first_chunk_frames=1, chunk_frames=3), device="cuda")
    empty = family.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    frames: dict[str, list[torch.Tensor]] = {}
    advance = engine._advance

    def recording(request, latent, logit):  # type: ignore[no-untyped-def]
        before = len(request.pending_latents)
        advance(request, latent, logit)
        if len(request.pending_latents) > before:
            frames.setdefault(request.request_id, []).append(latent)

    engine._advance = recording  # type: ignore[method-assign]
    for i, text in enumerate(TEXTS[:4]):
        engine.add_request(text, "default", family.make_params(seed=i), request_id=f"r{i}")
    streamed = run_to_completion(engine)
    for rid, latents in frames.items():
        offline = family.decode(torch.stack(latents)[None], family.new_decoder_state())[0].cpu()
        fade = family.traits.fade_in_samples
        offline[:fade] *= torch.linspace(0, 1, fade)
        assert rel_error(streamed[rid], offline) <= 1e-4, rid


def test_piper_on_cuda_equals_cpu() -> None:
    pytest.importorskip("piper")
    texts = ["Hello there, this is the default voice.", "Short one.", "Yes."]
    cpu = run_cpu_piper(texts)
    family = load_model("piper/joe", device="cuda")
    for graphs in ("off", "cuda"):
        out = run(family, texts, graphs=graphs)
        for rid, audio in cpu.items():
            assert rel_error(out[rid], audio) <= 1e-3, (graphs, rid)


def run_cpu_piper(texts: list[str]) -> dict[str, torch.Tensor]:
    family = load_model("piper/joe")
    engine = Engine(family, EngineConfig())
    empty = family.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    for i, text in enumerate(texts):
        engine.add_request(text, "default", family.make_params(seed=i), request_id=f"r{i}")
    return run_to_completion(engine)


def test_joe_ar_on_cuda_equals_cpu() -> None:
    """The default voice on the GPU (fixed-shape graphs, the overlapped loop) says what
    it says on the CPU, at speed 1 and faster (its z resampled as it comes: those rows
    decode eagerly, apart from the others)."""
    pytest.importorskip("piper")
    texts = ["Hello there, this is the default voice.", "Your code is A B 4 7.", "Yes."]
    speeds = [1.0, 1.5, 1.0]
    outputs = {}
    for device, config in (("cpu", {}), ("cuda", {"graphs": "cuda", "overlap": True})):
        family = load_model("pocket/joe-ar", device=device)
        engine = Engine(family, EngineConfig(**config), device=device)
        empty = family.empty_voice()
        engine.register_voice("default", empty.k, empty.v)
        for i, (text, speed) in enumerate(zip(texts, speeds, strict=True)):
            engine.add_request(text, "default", family.make_params(speed=speed),
                               request_id=f"r{i}")
        outputs[device] = run_to_completion(engine)
        assert engine.is_idle() and engine.check_integrity()
    for rid, audio in outputs["cpu"].items():
        assert rel_error(outputs["cuda"][rid].cpu(), audio) <= 1e-3, rid
