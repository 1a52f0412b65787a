"""Word timings (`words` events) from a Piper server: exact to the frame, because Piper's
duration predictor says when each phoneme is spoken. The reference here rebuilds those
durations in-process (same clauses, same seed, same noise draws) and finds each word's
first phoneme on its own."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import torch
import websockets
from server_harness import Server, start_server

TEXT = "Hello there, how are you doing today? I hope you are well. See you soon."
SEED = 4


@pytest.fixture(scope="module")
def piper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("piper"), "--model", "piper/joe")
    yield running
    running.stop()


async def _words(server: Server) -> tuple[list[dict], float]:
    async with websockets.connect(server.ws_url) as socket:
        await socket.send(json.dumps({"type": "configure", "seed": SEED, "word_timings": True}))
        await socket.recv()
        for word in TEXT.split(" "):
            await socket.send(json.dumps({"type": "text", "text": word + " "}))
        await socket.send(json.dumps({"type": "end"}))
        events = []
        async for message in socket:
            if isinstance(message, str):
                events.append(json.loads(message))
    assert not [e for e in events if e["type"] == "error"], events
    done = [e for e in events if e["type"] == "utterance.done"][0]
    return [w for e in events if e["type"] == "words" for w in e["words"]], done["audio_seconds"]


def _reference_word_starts() -> tuple[list[float], float]:
    """Each word's first frame, from Piper's own durations, in seconds; frame length."""
    from polyvox.models.piper.front import Sentence
    from polyvox.models.piper.phonemes import BOS, PAD
    from polyvox.serving import load_served

    served = load_served("piper/joe")
    family, model = served.family, served.family.model
    pipeline = served.engine.text_pipeline()
    clauses = pipeline.feed(TEXT) + pipeline.flush()
    generator = torch.Generator().manual_seed(SEED)
    scales = model.scales(1.0, True)
    id_map = model.phonemizer.config.phoneme_id_map
    hop, rate = family.audio.samples_per_frame, family.audio.sample_rate
    starts, offset = [], 0
    for clause in clauses:
        first_frames = []
        for phonemes in model.phonemizer.phonemize(clause):
            ids = model.phonemizer.phonemes_to_ids(phonemes)
            (stage1,) = model.front.run_stage1([Sentence(ids, scales, generator)])
            bounds = [0, *torch.cumsum(stage1.durations, 0).tolist()]
            position, at_word_start = len(id_map[BOS]) + len(id_map[PAD]), True
            for phoneme in phonemes:
                if phoneme not in id_map:
                    continue
                if phoneme == " ":
                    at_word_start = True
                elif at_word_start:
                    first_frames.append(offset + bounds[position])
                    at_word_start = False
                position += len(id_map[phoneme]) + len(id_map[PAD])
            offset += stage1.num_frames
        # NOTE: a test text whose espeak-ng words are its words, one to one.
        assert len(first_frames) == len(clause.split()), clause
        starts += [frame * hop / rate for frame in first_frames]
    return starts, hop / rate


def test_piper_word_timings_match_its_durations(piper_server: Server) -> None:
    words, audio_seconds = asyncio.run(_words(piper_server))
    assert [w["word"] for w in words] == TEXT.split()
    assert [w["start"] for w in words] == sorted(w["start"] for w in words)
    assert abs(words[-1]["end"] - audio_seconds) < 0.1
    starts, frame_seconds = _reference_word_starts()
    for word, start in zip(words, starts):
        assert abs(word["start"] - start) <= frame_seconds + 1e-4, (word, start)
