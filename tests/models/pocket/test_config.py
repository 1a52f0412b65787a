"""Configs mirror pocket-tts 4.0.1's, and text chunking reproduces its rules."""

from __future__ import annotations

import pytest

from polyvox.models.pocket.config import config_from_dict, config_to_dict, load_config_file
from polyvox.models.pocket.loader import get_config, preset_names

pocket_tts = pytest.importorskip("pocket_tts")


def _reference_files():
    from pocket_tts.utils.config import CONFIGS_DIR

    return sorted(CONFIGS_DIR.glob("*.yaml"))


def test_every_pocket_tts_config_has_a_preset() -> None:
    assert sorted(p.stem for p in _reference_files()) == preset_names()


@pytest.mark.parametrize("path", _reference_files(), ids=lambda p: p.stem)
def test_preset_equals_pocket_tts_config(path) -> None:
    from pocket_tts.utils.config import load_config

    ours = config_to_dict(get_config(path.stem))
    theirs = load_config(path).model_dump()
    theirs["mimi"]["transformer"]["output_dimensions"] = list(
        theirs["mimi"]["transformer"]["output_dimensions"])
    for side in ("decoder_transformer",):
        if theirs["mimi"][side] is not None:
            theirs["mimi"][side]["output_dimensions"] = list(theirs["mimi"][side]["output_dimensions"])
    assert _normalized(ours) == _normalized(theirs)
    assert load_config_file(path) == get_config(path.stem).replace(name=path.stem)


def _normalized(value):
    if isinstance(value, dict):
        return {k: _normalized(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalized(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def test_short_names_resolve_to_dated_presets() -> None:
    assert get_config("english_2m").name == "english_2m_2026-10"


def test_unknown_config_lists_the_known_ones() -> None:
    with pytest.raises(KeyError, match="english_7m_2026-10"):
        get_config("klingon")


def test_unknown_yaml_field_is_rejected() -> None:
    data = config_to_dict(get_config("english_2m"))
    data["flow_lm"]["surprise"] = 1
    with pytest.raises(ValueError, match="surprise"):
        config_from_dict(data)


def test_unknown_sampler_type_is_rejected() -> None:
    data = config_to_dict(get_config("english_2m"))
    data["flow_lm"]["flow"]["type"] = "diffusion"
    with pytest.raises(ValueError, match="flow.type"):
        config_from_dict(data)


TEXTS = [
    "hello world",
    "It costs 3.5 dollars. Then it stops!",
    "A short one; then a colon: and a dash -",
    "  Multiple   spaces\nand lines\r\nhere  ",
    "“Quoted,” she said, ‘softly’ — and left.",
    " ".join(["This is a rather long sentence with many words, commas, and clauses"] * 4) + ".",
    "One. Two! Three? Four... Five.",
]


@pytest.mark.parametrize("config_name", ["english_2m", "french", "english_2026-01"])
@pytest.mark.parametrize("text", TEXTS)
def test_chunks_and_prompts_match_pocket_tts(tokenizer_dir, config_name, text) -> None:
    from pocket_tts.models.text_chunking import prepare_text_prompt, split_into_best_sentences
    from pocket_tts.modules.text_conditioner import SentencePieceTokenizer

    from polyvox.models.pocket.local_tokenizer import train_local_tokenizer
    from polyvox.models.pocket.text import Tokenizer, prepare_text, split_into_chunks

    config = get_config(config_name)
    path = train_local_tokenizer(tokenizer_dir, "sentencepiece")
    ours_tok = Tokenizer(path, "sentencepiece", 4000)
    theirs_tok = SentencePieceTokenizer(4000, str(path))
    rules = (config.pad_with_spaces_for_short_inputs, config.remove_semicolons,
             config.append_terminal_punctuation, config.capitalize_first_letter,
             config.replace_characters)
    theirs = split_into_best_sentences(theirs_tok, text, 50, *rules[:2],
                                       append_terminal_punctuation=rules[2],
                                       capitalize_first_letter=rules[3],
                                       replace_characters=rules[4])
    assert split_into_chunks(text, ours_tok, config) == theirs
    for chunk in theirs:
        prepared = prepare_text(chunk, config)
        assert (prepared.text, prepared.frames_after_eos_guess) == prepare_text_prompt(chunk, *rules)


def test_empty_text_is_refused() -> None:
    from polyvox.models.pocket.text import prepare_text

    with pytest.raises(ValueError, match="empty"):
        prepare_text("   \n ", get_config("english_2m"))
