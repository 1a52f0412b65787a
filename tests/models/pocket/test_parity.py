"""polyvox's Pocket family equals pocket-tts 4.0.1 (same random weights, temperature 0).

NOTE: the random weights feed the previous latent back weakly (see random_init); with full
gain a random AR loop is chaotic and float rounding alone would separate any two correct
implementations after a few dozen frames.
"""

from __future__ import annotations

import pytest
import torch
from parity import eos_threshold_that_fires, polyvox_generate, reference_generate, rel_error

from polyvox.models.pocket.text import split_into_chunks

TOLERANCE = 1e-4
SHORT = "Hello world."
MEDIUM = "The quick brown fox jumps over the lazy dog, twice."
# More than 50 tokens: pocket-tts generates it as several chunks.
LONG = (
    "This sentence is the first of a few. The second one is here to make the text long "
    "enough! Does the third one ask a question? The fourth sentence, with a comma, ends it. "
    "A fifth one follows for good measure, and a sixth closes the paragraph."
)

CASES = [
    ("english_2m", None, [SHORT, LONG]),  # pointwise head, GQA, low-rank LUT, z_proj
    ("english_7m", None, [MEDIUM]),  # drifting head
    ("english", None, [SHORT]),  # lsd head, tokenizers JSON, 100M backbone
    ("english_2m", "flow_matching", [MEDIUM]),
]


@pytest.mark.parametrize(("name", "flow_type", "texts"), CASES)
def test_latents_and_audio_match_pocket_tts(make_pair, name, flow_type, texts) -> None:
    pair = make_pair(name, flow_type)
    for text in texts:
        threshold = eos_threshold_that_fires(pair.polyvox, text)
        ref_latents, ref_audio = reference_generate(pair.reference, text, threshold)
        latents, audio = polyvox_generate(pair.polyvox, text, threshold)
        assert rel_error(latents, ref_latents) <= TOLERANCE
        assert rel_error(audio, ref_audio) <= TOLERANCE


def test_long_text_is_generated_in_several_chunks(make_pair) -> None:
    pair = make_pair("english_2m")
    assert len(split_into_chunks(LONG, pair.polyvox.tokenizer, pair.config)) > 1


def test_eos_ends_generation_early(make_pair) -> None:
    pair = make_pair("english_2m")
    model = pair.polyvox
    threshold = eos_threshold_that_fires(model, MEDIUM)
    stopped, _ = polyvox_generate(model, MEDIUM, threshold)
    full, _ = polyvox_generate(model, MEDIUM, 1e9)
    (chunk,) = split_into_chunks(MEDIUM, model.tokenizer, model.config)
    tokens, _ = model.tokenize(chunk)
    assert full.shape[0] == model.max_frames(tokens.shape[0])
    assert stopped.shape[0] < full.shape[0]
    assert torch.equal(stopped, full[: stopped.shape[0]])


def test_voice_from_audio_matches_pocket_tts(make_pair, tmp_path) -> None:
    import soundfile

    pair = make_pair("english_2m")
    # 1.3 s at 16 kHz (resampled to 24 kHz): a chirp with a little noise, then silence.
    generator = torch.Generator().manual_seed(3)
    t = torch.arange(int(1.3 * 16000)) / 16000
    wave = 0.5 * torch.sin(2 * torch.pi * (200 + 300 * t) * t)
    wave += 0.02 * torch.randn(t.shape, generator=generator)
    wave[int(1.0 * 16000):] *= 0.001
    path = tmp_path / "voice.wav"
    soundfile.write(str(path), wave.numpy(), 16000, subtype="PCM_16")

    ref_state = pair.reference.get_state_for_audio_prompt(path)
    from polyvox.models.pocket.model import load_voice_path

    voice = load_voice_path(pair.polyvox, path)
    ref_cache = ref_state["transformer.layers.0.self_attn"]["cache"]
    length = int(ref_state["transformer.layers.0.self_attn"]["offset"][0])
    assert voice.length == length
    for layer in range(pair.config.flow_lm.transformer.num_layers):
        cache = ref_state[f"transformer.layers.{layer}.self_attn"]["cache"][:, 0, :length]
        assert rel_error(voice.k[layer], cache[0]) <= TOLERANCE
        assert rel_error(voice.v[layer], cache[1]) <= TOLERANCE
    assert ref_cache.shape[2] >= length

    threshold = eos_threshold_that_fires(pair.polyvox, SHORT, voice)
    ref_latents, ref_audio = reference_generate(pair.reference, SHORT, threshold, ref_state)
    latents, audio = polyvox_generate(pair.polyvox, SHORT, threshold, voice)
    assert rel_error(latents, ref_latents) <= TOLERANCE
    assert rel_error(audio, ref_audio) <= TOLERANCE


def test_exported_voice_state_loads_as_voice(make_pair, tmp_path) -> None:
    from pocket_tts.models.model_state import export_model_state

    from polyvox.models.pocket.model import load_voice_path

    pair = make_pair("english_2m")
    audio = torch.sin(torch.arange(30000) / 7.0) * 0.3
    state = pair.reference.get_state_for_audio_prompt(audio[None])
    path = tmp_path / "exported.safetensors"
    export_model_state(state, path)
    voice = load_voice_path(pair.polyvox, path)
    direct = pair.polyvox.voice_from_audio(audio, pair.polyvox.sample_rate)
    assert voice.length == direct.length
    assert rel_error(voice.k, direct.k) <= TOLERANCE

    threshold = eos_threshold_that_fires(pair.polyvox, SHORT, voice)
    ref_latents, _ = reference_generate(pair.reference, SHORT, threshold, state)
    latents, _ = polyvox_generate(pair.polyvox, SHORT, threshold, voice)
    assert rel_error(latents, ref_latents) <= TOLERANCE


def test_a_perturbed_weight_breaks_parity(make_pair) -> None:
    """The parity tests bite: one changed weight must be caught."""
    pair = make_pair("english_2m")
    threshold = 1e9
    ref_latents, ref_audio = reference_generate(pair.reference, SHORT, threshold)
    weight = pair.polyvox.flow_lm.transformer.layers[3].linear1.weight
    original = weight.detach().clone()
    try:
        with torch.no_grad():
            weight[5, 7] += 0.05
        latents, audio = polyvox_generate(pair.polyvox, SHORT, threshold)
    finally:
        with torch.no_grad():
            weight.copy_(original)
    assert rel_error(latents, ref_latents) > TOLERANCE
    assert rel_error(audio, ref_audio) > TOLERANCE


@pytest.mark.parametrize(("name", "text"), [("english_2m", LONG), ("english", SHORT)])
def test_the_engine_matches_pocket_tts_through_the_compiled_kernel(make_pair, name,
                                                                   text) -> None:
    """The served path (the engine, pocket-compatible chaining, the AR step's attention in
    the KV pool through the compiled kernel where it builds) against pocket-tts itself."""
    from polyvox.config import EngineConfig
    from polyvox.engine.engine import Engine, run_to_completion
    from polyvox.models.layers import cpu_kernels
    from polyvox.models.pocket.model import GenerationParams

    pair = make_pair(name, None)
    threshold = eos_threshold_that_fires(pair.polyvox, text)
    _, ref_audio = reference_generate(pair.reference, text, threshold)
    engine = Engine(pair.polyvox, EngineConfig(chaining="pocket"))
    assert (engine.runner.decode_kernel is not None) == cpu_kernels.can_build()
    empty = pair.polyvox.empty_voice()
    engine.register_voice("default", empty.k, empty.v)
    params = GenerationParams(temperature=0.0, eos_threshold=threshold)
    engine.add_request(text, "default", params, request_id="r", normalize=False)
    audio = run_to_completion(engine)["r"]
    assert rel_error(audio, ref_audio) <= TOLERANCE
