"""The evaluation sets: big enough, varied, frozen (test split), and disjoint from every
sentence the repository tunes or trains on."""

from __future__ import annotations

import hashlib

import pytest

from polyvox.asr.customer_service import CUSTOMER_SERVICE
from polyvox.asr.sentences import SENTENCES as ASR_SENTENCES
from polyvox.asr.wer import normalize_for_wer
from polyvox.bench.texts import SENTENCES as BENCH_SENTENCES
from polyvox.eval.sets import SPLITS, EvalItem, file_digest, load_items, set_path

# NOTE: the test split is frozen. Figures in docs/voices.md were measured on exactly these
# bytes; a change to the files is a new test split, and every figure must be measured again.
# Tune on dev.
TEST_SPLIT_SHA256 = {
    "read": "e2b6690fba31c8436cf0e2d50da3f28b53bb6ad48235ded847d4303c089214e0",
    "service": "9c0424d83fac4e2933eb75864439ba3ee7f13868e6786d838756b12c608f9b91",
}
SERVICE_CATEGORIES = {"money", "date", "time", "phone", "code", "email", "url", "address",
                      "abbreviation", "letters", "percent", "ordinal"}
# The training data of pocket/joe-ar is generate_sentences(8000, seed=0, version=1)
# (docs/distill.md); other seeds are a sample of what that grammar makes.
GENERATOR_RUNS = ((0, 8000), (1, 2000), (2, 2000))
# Version 2 adds customer-service lines and paragraphs (issue 25): its data for the next
# joe-ar starts at seed 0.
GENERATOR_V2_RUNS = ((0, 8000), (1, 2000))
# Version 3 (a wide vocabulary) made runs/data-wide at seed 30 (docs/distill.md, session 26).
GENERATOR_V3_RUNS = ((30, 10000),)
SHARED_RUN = 8  # words in a row an eval sentence may not share with generated text


def _words(text: str) -> tuple[str, ...]:
    return tuple(normalize_for_wer(text))


@pytest.mark.parametrize("kind", ["read", "service"])
def test_the_test_split_is_frozen(kind: str) -> None:
    assert file_digest("test", kind) == TEST_SPLIT_SHA256[kind]
    assert hashlib.sha256(set_path("test", kind).read_bytes()).hexdigest() == \
        TEST_SPLIT_SHA256[kind]


@pytest.mark.parametrize("split", SPLITS)
def test_sizes_and_shape(split: str) -> None:
    read = load_items(split, "read")
    service = load_items(split, "service")
    assert len(read) >= 100 and len(service) >= 60
    assert load_items(split) == read + service
    for item in read:
        assert 6 <= len(item.text.split()) <= 25, item.text
        assert not any(char.isdigit() for char in item.text), item.text
        assert item.reference == item.text and item.text[-1] in ".?!", item.text
    assert sum(item.text.endswith("?") for item in read) >= 10  # questions
    assert sum(item.text.endswith("!") for item in read) >= 5  # exclamations
    assert [item.number for item in read] == list(range(1, len(read) + 1))


@pytest.mark.parametrize("split", SPLITS)
def test_service_lines_cover_the_categories_with_spoken_references(split: str) -> None:
    service = load_items(split, "service")
    assert {c for item in service for c in item.categories} >= SERVICE_CATEGORIES
    for item in service:
        assert set(item.categories) <= SERVICE_CATEGORIES | {"number", "unit"}, item
        assert item.reference == item.reference.lower(), item.reference
        assert not set(item.reference) & set("0123456789$€£%@#/&:.,"), item.reference


def test_no_sentence_repeats_within_or_across_splits() -> None:
    seen: dict[tuple[str, ...], EvalItem] = {}
    for split in SPLITS:
        for item in load_items(split):
            words = _words(item.text)
            assert words not in seen, (item, seen.get(words))
            seen[words] = item


def test_disjoint_from_the_repository_sets() -> None:
    existing = {_words(text) for text in (*ASR_SENTENCES, *BENCH_SENTENCES)}
    existing |= {_words(sentence.text) for sentence in CUSTOMER_SERVICE}
    for split in SPLITS:
        for item in load_items(split):
            assert _words(item.text) not in existing, item


@pytest.fixture(scope="module")
def generated() -> list[str]:
    from polyvox.train.sentences import generate_sentences

    return [text for seed, count in GENERATOR_RUNS
            for text in generate_sentences(count, seed, version=1)]


def test_disjoint_from_the_training_generator(generated: list[str]) -> None:
    produced = {_words(text) for text in generated}
    vocabulary = {word for words in produced for word in words}
    for split in SPLITS:
        for item in load_items(split):
            words = _words(item.text)
            assert words not in produced, item
            # Stronger: each sentence has a word the generator never used in those 12,000
            # sentences, so its grammar (which only draws from its word lists) cannot make it.
            assert set(words) - vocabulary, item


def _runs(words: tuple[str, ...], length: int) -> set[tuple[str, ...]]:
    return {words[i: i + length] for i in range(len(words) - length + 1)}


@pytest.mark.parametrize("version, generator_runs", [(2, GENERATOR_V2_RUNS), (3, GENERATOR_V3_RUNS)])
def test_the_service_grammar_never_comes_near_an_eval_sentence(
        version: int, generator_runs: tuple[tuple[int, int], ...]) -> None:
    """Versions 2 and 3 speak customer service, so they share words with the service lines
    (the vocabulary check above cannot hold); instead no generated item shares 8 words in
    a row with any eval sentence, read the way the engine reads it (normalized)."""
    from polyvox.text.normalize import make_normalizer
    from polyvox.train.sentences import generate_sentences

    runs: set[tuple[str, ...]] = set()
    produced: set[tuple[str, ...]] = set()
    for seed, count in generator_runs:
        for text in generate_sentences(count, seed, version=version):
            produced.add(_words(text))
            runs |= _runs(_words(text), SHARED_RUN)
    normalizer = make_normalizer("en")
    for split in SPLITS:
        for item in load_items(split):
            words = _words(normalizer.normalize(item.text))
            assert words not in produced, item
            shared = _runs(words, SHARED_RUN) & runs
            assert not shared, (item, shared)
