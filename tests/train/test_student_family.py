"""The student behind the engine: batched equals one at a time, the engine equals the
offline path, and windowed decoding equals whole-clause decoding."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import yaml

from polyvox.config import EngineConfig
from polyvox.engine.engine import Engine, run_to_completion
from polyvox.train.student import config_to_dict

TEXT = "The kite flew. It came back, slowly."


@pytest.fixture(scope="module")
def family(tiny_config, teacher, tmp_path_factory: pytest.TempPathFactory):
    from polyvox.train.student_family import load_student_family

    path = tmp_path_factory.mktemp("student") / "tiny.yaml"
    path.write_text(yaml.safe_dump(config_to_dict(tiny_config)))
    return load_student_family(path, seed=1)  # random weights: noise, but deterministic


def _params(family, seed: int):
    # random weights never say EOS reliably: clauses run to their length cap
    return dataclasses.replace(family.make_params(seed=seed), eos_threshold=1e9)


def _engine(family) -> Engine:
    engine = Engine(family, EngineConfig(max_clause_tokens=400, chunk_frames=4))
    empty = family.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    return engine


def test_formats(family) -> None:
    assert family.audio.samples_per_frame == 4 * 256
    assert family.latent_dim == 768 and family.decoder_history == 3
    assert family.kv_spec.num_layers == 3


def test_batched_equals_one_at_a_time_and_offline(family) -> None:
    engine = _engine(family)
    engine.add_request(TEXT, "default", _params(family, 1), request_id="a")
    engine.add_request("Good morning!", "default", _params(family, 2), request_id="b")
    together = run_to_completion(engine)
    assert engine.is_idle() and engine.check_integrity()
    alone = {}
    for rid, text, seed in (("a", TEXT, 1), ("b", "Good morning!", 2)):
        engine = _engine(family)
        engine.add_request(text, "default", _params(family, seed), request_id=rid)
        alone.update(run_to_completion(engine))
        offline = family.synthesize(text, params=_params(family, seed), max_tokens=400)
        torch.testing.assert_close(alone[rid], offline, atol=1e-4, rtol=0)
    for rid in ("a", "b"):
        torch.testing.assert_close(together[rid], alone[rid], atol=1e-4, rtol=0)


def test_windowed_decoding_equals_whole_clause_decoding(family) -> None:
    generator = torch.Generator().manual_seed(0)
    latents = torch.randn(1, 23, family.latent_dim, generator=generator) * 0.5
    whole = family.decode(latents, family.new_decoder_state())
    state, pieces, done = family.new_decoder_state(), [], 0
    context = family.decoder_lookahead
    for size in (1, 4, 4, 4, 4, 4, 2):
        lookahead = min(context, 23 - done - size)
        window = latents[:, done: done + size + lookahead]
        history = min(context, done)
        pieces.append(family.decode(window, state, num_frames=size, history=history))
        done += size
    torch.testing.assert_close(torch.cat(pieces, 1), whole, atol=1e-5, rtol=0)


def test_speed_other_than_one_is_refused(family) -> None:
    with pytest.raises(ValueError, match="speed"):
        family.make_params(speed=1.5)
