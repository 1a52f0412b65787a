"""PolyvoxTTSService inside a real Pipecat pipeline (a fake LLM writing tokens, the
service, a sink collecting frames) against a real polyvox server."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from pipecat.frames.frames import (
    DataFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner
from server_harness import Server

from polyvox.plugins.pipecat import PolyvoxTTSService

RATE = 16000  # the pipeline's output rate (the server resamples to it)
TOKENS = ("Hello there, this is the first sentence of the answer. And then the answer goes "
          "on with a second sentence that the model keeps writing for a while.").split(" ")
TOKEN_SECONDS = 0.08


@dataclass
class Prompt(DataFrame):
    """What the fake LLM answers: its tokens, one every TOKEN_SECONDS."""

    tokens: list[str] = field(default_factory=list)


class FakeLLM(FrameProcessor):
    def __init__(self) -> None:
        super().__init__()
        self.last_token_at: float | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if not isinstance(frame, Prompt):
            await self.push_frame(frame, direction)
            return
        await self.push_frame(LLMFullResponseStartFrame())
        for i, token in enumerate(frame.tokens):
            await self.push_frame(LLMTextFrame(token if i == 0 else " " + token))
            self.last_token_at = time.monotonic()
            await asyncio.sleep(TOKEN_SECONDS)
        await self.push_frame(LLMFullResponseEndFrame())


class Sink(FrameProcessor):
    def __init__(self) -> None:
        super().__init__()
        self.frames: list[tuple[float, Frame]] = []
        self.stopped = asyncio.Event()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        self.frames.append((time.monotonic(), frame))
        if isinstance(frame, TTSStoppedFrame):
            self.stopped.set()
        await self.push_frame(frame, direction)

    def of(self, kind: type) -> list[tuple[float, Any]]:
        return [(at, f) for at, f in self.frames if isinstance(f, kind)]


async def _run(server: Server, scenario: Any) -> tuple[FakeLLM, Sink, PolyvoxTTSService]:
    llm, sink = FakeLLM(), Sink()
    tts = PolyvoxTTSService(url=server.url, voice="default", seed=3)
    worker = PipelineWorker(Pipeline([llm, tts, sink]),
                            params=PipelineParams(audio_out_sample_rate=RATE),
                            idle_timeout_secs=None)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        await scenario(worker, llm, sink, tts)
        await worker.queue_frame(EndFrame())
        await asyncio.wait_for(running, 60)
    finally:
        if not running.done():
            await worker.cancel()
            await running
    return llm, sink, tts


def test_audio_arrives_before_the_llm_finishes_with_word_timestamps(server: Server) -> None:
    async def scenario(worker: Any, llm: FakeLLM, sink: Sink, tts: Any) -> None:
        await worker.queue_frame(Prompt(tokens=TOKENS))
        await asyncio.wait_for(sink.stopped.wait(), 60)

    llm, sink, _ = asyncio.run(_run(server, scenario))
    audio = sink.of(TTSAudioRawFrame)
    assert audio and audio[0][0] < llm.last_token_at  # speaking while the LLM writes
    assert all(f.sample_rate == RATE and len(f.audio) % 2 == 0 for _, f in audio)
    words = [f.text for _, f in sink.of(TTSTextFrame)]
    assert " ".join(words).split() == " ".join(TOKENS).split()
    server.wait_idle()


def _cancelled_streams(server: Server) -> float:
    return server.metric('polyvox_streams_total{endpoint="websocket",outcome="cancelled"}')


def test_an_interruption_stops_the_audio_and_frees_the_engine(server: Server) -> None:
    interrupted_at: list[float] = []

    async def scenario(worker: Any, llm: FakeLLM, sink: Sink, tts: Any) -> None:
        await worker.queue_frame(Prompt(tokens=TOKENS * 3))
        while len(sink.of(TTSAudioRawFrame)) < 3:  # mid-sentence
            await asyncio.sleep(0.01)
        interrupted_at.append(time.monotonic())
        await worker.queue_frame(InterruptionFrame())
        # The engine holds nothing for the cut utterance soon after (the cancel's ack).
        await asyncio.to_thread(server.wait_idle, 5.0)
        await asyncio.sleep(0.5)  # any audio still in flight would arrive by now
        # The conversation goes on: the next answer is spoken in full.
        sink.stopped.clear()
        await worker.queue_frame(Prompt(tokens=["Sure,", "go", "ahead."]))
        await asyncio.wait_for(sink.stopped.wait(), 60)

    cancelled = _cancelled_streams(server)
    llm, sink, _ = asyncio.run(_run(server, scenario))
    assert _cancelled_streams(server) == cancelled + 1  # the server got `cancel`
    seen = [at for at, _ in sink.of(InterruptionFrame)]
    assert seen, "the interruption went through the service"
    cut = {f.context_id for at, f in sink.of(TTSAudioRawFrame) if at < seen[0]}
    after = [f for at, f in sink.frames if at > seen[0]]
    cut_audio = [f for f in after if isinstance(f, TTSAudioRawFrame) and f.context_id in cut]
    assert len(cut_audio) <= 1  # within one chunk
    assert not any(isinstance(f, TTSStoppedFrame) and f.context_id in cut for f in after)
    words = [f.text for f in after if isinstance(f, TTSTextFrame)]
    assert words[-3:] == ["Sure,", "go", "ahead."]
    server.wait_idle()


def test_a_new_socket_after_the_server_restarts_between_utterances(tmp_path: Any) -> None:
    from server_harness import free_port, start_server

    port = free_port()

    def serve() -> Server:  # the same address each time: the client reconnects to it
        return start_server(tmp_path, port=port)

    servers = [serve()]

    async def scenario(worker: Any, llm: FakeLLM, sink: Sink, tts: Any) -> None:
        await worker.queue_frame(Prompt(tokens=["First", "answer", "here."]))
        await asyncio.wait_for(sink.stopped.wait(), 60)
        await asyncio.to_thread(servers[0].stop)
        servers.append(await asyncio.to_thread(serve))
        sink.stopped.clear()
        await worker.queue_frame(Prompt(tokens=["Second", "answer", "after", "a", "restart."]))
        await asyncio.wait_for(sink.stopped.wait(), 60)

    try:
        _, sink, _ = asyncio.run(_run(servers[0], scenario))
    finally:
        for running in servers:
            running.stop()
    words = [f.text for _, f in sink.of(TTSTextFrame)]
    assert words == ["First", "answer", "here.", "Second", "answer", "after", "a", "restart."]
