"""Text that arrives in pieces, and normalization on the way in."""

from __future__ import annotations

import random

import torch
from conftest import make_engine, params, rel_error

from polyvox.engine.engine import run_to_completion

TEXT = ("Your balance is $1,249.50 as of 02/17/2024. Call 555-123-4567, ext. 89, "
        "or write to j.smith@example.com before 3:45 PM. Thanks for calling!")


def test_text_in_pieces_equals_text_whole(model, voice) -> None:
    whole = make_engine(model, voice)
    whole.add_request(TEXT, "chirp", params(3), request_id="whole")
    expected = run_to_completion(whole)["whole"]

    rng = random.Random(7)
    cuts = sorted(rng.sample(range(1, len(TEXT)), 25))
    pieces = [TEXT[a:b] for a, b in zip([0, *cuts], [*cuts, len(TEXT)])]
    engine = make_engine(model, voice)
    engine.add_request("", "chirp", params(3), request_id="streamed", text_complete=False)
    audio: list[torch.Tensor] = []
    first_audio_before_end = False
    for piece in pieces:
        engine.add_text("streamed", piece)
        for _ in range(3):
            for chunk in engine.step():
                audio.append(chunk.samples)
                first_audio_before_end |= chunk.samples.numel() > 0
    engine.finish_text("streamed")
    audio += list(run_to_completion(engine).values())
    assert first_audio_before_end, "audio must start before the text ends"
    assert rel_error(torch.cat(audio), expected) <= 1e-4


def test_normalization_reads_numbers_as_words(model) -> None:
    engine = make_engine(model)
    spoken = engine.add_request("I owe $5 on 3/4.", "default", params(0), request_id="on")
    raw = engine.add_request("I owe $5 on 3/4.", "default", params(0), request_id="off",
                             normalize=False)
    assert "five dollars" in " ".join(spoken.pending_clauses)
    assert "$5" in " ".join(raw.pending_clauses)
    run_to_completion(engine)
    assert engine.is_idle()


def test_empty_and_symbol_only_text_is_refused(model) -> None:
    import pytest

    from polyvox.engine.engine import EngineError

    engine = make_engine(model)
    for text in ["", "   ", "\n\t"]:
        with pytest.raises(EngineError, match="empty"):
            engine.add_request(text, "default", params(0))
    assert engine.is_idle()


def test_a_text_feed_that_breaks_ends_its_stream_with_an_error(model) -> None:
    """Streamed text whose source raises: the stream ends with an error at once (never a
    listener left waiting), the engine frees what the request held and serves on."""
    import asyncio

    import pytest

    from polyvox.engine.async_engine import AsyncEngine
    from polyvox.engine.engine import EngineError

    engine = make_engine(model)
    runtime = AsyncEngine(engine)

    async def pieces():  # type: ignore[no-untyped-def]
        yield "Hello there, "
        raise UnicodeError("a piece the text path cannot take")

    async def consume(text) -> int:  # type: ignore[no-untyped-def]
        samples = 0
        async for chunk in runtime.generate(text, "default", params(1)):
            samples += chunk.samples.numel()
        return samples

    async def main() -> int:
        with pytest.raises(EngineError, match="could not be read"):
            await asyncio.wait_for(consume(pieces()), timeout=60)
        return await asyncio.wait_for(consume("Still serving."), timeout=120)

    runtime.start()
    try:
        assert asyncio.run(main()) > 0
        assert engine.is_idle() and engine.check_integrity()
    finally:
        runtime.stop()


def test_a_caller_that_leaves_while_its_request_is_being_added_leaks_nothing(model) -> None:
    """The caller is cancelled while the engine thread has not yet run the command that
    adds its streamed request: the request is still added, and must still be aborted (it
    would wait for text for ever, holding a decoder slot)."""
    import asyncio
    import threading

    from polyvox.engine.async_engine import AsyncEngine

    engine = make_engine(model)
    runtime = AsyncEngine(engine)
    gate = threading.Event()

    async def pieces():  # type: ignore[no-untyped-def]
        yield "Never read."

    async def main() -> None:
        runtime._commands.put(gate.wait)  # the engine thread is busy until the gate opens
        stream = runtime.generate(pieces(), "default", params(1))
        caller = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.05)  # its add command is queued behind the gate
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        gate.set()
        await runtime.call(lambda: None)  # every command before this one has run

    runtime.start()
    try:
        asyncio.run(main())
        assert asyncio.run(_on_engine(runtime, engine.is_idle))
        assert not engine.requests and engine.check_integrity()
    finally:
        gate.set()
        runtime.stop()


async def _on_engine(runtime, function):  # type: ignore[no-untyped-def]
    return await runtime.call(function)
