"""PolyvoxTTS inside a real LiveKit AgentSession (a fake LLM writing tokens, an audio
output collecting frames) against a real polyvox server."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from livekit import rtc
from livekit.agents import DEFAULT_API_CONNECT_OPTIONS, Agent, AgentSession, APIConnectOptions, llm
from livekit.agents.voice import io
from server_harness import Server

from polyvox.plugins.livekit import PolyvoxTTS

RATE = 24000
TOKENS = ("Hello there, this is the first sentence of the answer. And then the answer goes "
          "on with a second sentence that the model keeps writing for a while.").split(" ")
TOKEN_SECONDS = 0.08


class FakeLLM(llm.LLM):
    """Answers every turn with the next token list, one token every TOKEN_SECONDS."""

    def __init__(self, answers: list[list[str]]) -> None:
        super().__init__()
        self.answers = answers
        self.last_token_at: float | None = None

    def chat(self, *, chat_ctx: llm.ChatContext, tools: list[Any] | None = None,
             conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
             **_: Any) -> llm.LLMStream:
        return FakeStream(self, chat_ctx=chat_ctx, tools=tools or [], conn_options=conn_options)


class FakeStream(llm.LLMStream):
    async def _run(self) -> None:
        fake: FakeLLM = self._llm  # type: ignore[assignment]
        for i, token in enumerate(fake.answers.pop(0)):
            self._event_ch.send_nowait(llm.ChatChunk(id="fake", delta=llm.ChoiceDelta(
                role="assistant", content=token if i == 0 else " " + token)))
            fake.last_token_at = time.monotonic()
            await asyncio.sleep(TOKEN_SECONDS)


class Sink(io.AudioOutput):
    """Plays instantly: records each frame and when it came."""

    def __init__(self) -> None:
        super().__init__(label="sink", capabilities=io.AudioOutputCapabilities(pause=False),
                         sample_rate=RATE)
        self.frames: list[tuple[float, rtc.AudioFrame]] = []
        self._pushed = 0.0

    async def capture_frame(self, frame: rtc.AudioFrame) -> None:
        await super().capture_frame(frame)
        if not self._pushed:
            self.on_playback_started(created_at=time.time())
        self._pushed += frame.duration
        self.frames.append((time.monotonic(), frame))

    def flush(self) -> None:
        super().flush()
        self._finish(interrupted=False)

    def clear_buffer(self) -> None:
        self._finish(interrupted=True)

    def _finish(self, interrupted: bool) -> None:
        if self._pushed:
            played, self._pushed = self._pushed, 0.0
            self.on_playback_finished(playback_position=played, interrupted=interrupted)


async def _session(server: Server, answers: list[list[str]]
                   ) -> tuple[AgentSession, FakeLLM, Sink, PolyvoxTTS]:
    fake, sink = FakeLLM(answers), Sink()
    voice = PolyvoxTTS(url=server.url, sample_rate=RATE, seed=3)
    session = AgentSession(llm=fake, tts=voice)
    session.output.audio = sink
    await session.start(agent=Agent(instructions="Answer."))
    return session, fake, sink, voice


def test_audio_arrives_before_the_llm_finishes(server: Server) -> None:
    async def run() -> tuple[FakeLLM, Sink]:
        session, fake, sink, voice = await _session(server, [TOKENS])
        try:
            await asyncio.wait_for(session.generate_reply(user_input="Hi."), 60)
        finally:
            await session.aclose()
            await voice.aclose()
        return fake, sink

    fake, sink = asyncio.run(run())
    assert sink.frames and sink.frames[0][0] < fake.last_token_at
    assert all(f.sample_rate == RATE for _, f in sink.frames)
    server.wait_idle()


def test_an_interruption_stops_the_audio_and_frees_the_engine(server: Server) -> None:
    async def run() -> tuple[Sink, int, int]:
        session, fake, sink, voice = await _session(server, [TOKENS * 3, ["Sure,", "go", "on."]])
        try:
            handle = session.generate_reply(user_input="Tell me a story.")
            while len(sink.frames) < 3:  # mid-sentence
                await asyncio.sleep(0.01)
            await handle.interrupt()
            cut = len(sink.frames)
            await asyncio.to_thread(server.wait_idle, 5.0)  # the engine let it go
            await asyncio.sleep(0.5)  # any audio still in flight would arrive by now
            after_cut = len(sink.frames)
            await asyncio.wait_for(session.generate_reply(user_input="Go on."), 60)
        finally:
            await session.aclose()
            await voice.aclose()
        return sink, cut, after_cut

    cancelled = _cancelled_streams(server)
    sink, cut, after_cut = asyncio.run(run())
    assert _cancelled_streams(server) == cancelled + 1  # the server got `cancel`
    assert after_cut - cut <= 1  # within one chunk
    assert len(sink.frames) > after_cut  # the next answer is spoken
    server.wait_idle()


def _cancelled_streams(server: Server) -> float:
    return server.metric('polyvox_streams_total{endpoint="websocket",outcome="cancelled"}')


def test_stream_yields_word_timings_and_synthesize_works(server: Server) -> None:
    async def run() -> tuple[list[Any], int]:
        voice = PolyvoxTTS(url=server.url, sample_rate=RATE)
        try:
            stream = voice.stream()
            for i, token in enumerate(TOKENS):
                stream.push_text(token if i == 0 else " " + token)
            stream.end_input()
            words: list[Any] = []
            async for audio in stream:
                words += audio.frame.userdata.get("lk.timed_transcripts") or []
            num_samples = 0
            async for audio in voice.synthesize("A short one."):
                num_samples += audio.frame.samples_per_channel
        finally:
            await voice.aclose()
        return words, num_samples

    words, num_samples = asyncio.run(run())
    assert [w.strip() for w in words] == TOKENS
    starts = [w.start_time for w in words]
    assert starts == sorted(starts)
    assert num_samples > 0


def test_a_new_socket_after_the_server_restarts_between_turns(tmp_path: Any) -> None:
    from server_harness import free_port, start_server

    port = free_port()

    def serve() -> Server:  # the same address each time: the client reconnects to it
        return start_server(tmp_path, port=port)

    servers = [serve()]

    async def run() -> list[int]:
        voice = PolyvoxTTS(url=servers[0].url, sample_rate=RATE)
        counts = []
        try:
            for text in ("First answer here.", "Second answer after a restart."):
                num_samples = 0
                async for audio in voice.synthesize(text):
                    num_samples += audio.frame.samples_per_channel
                counts.append(num_samples)
                if len(servers) == 1:
                    await asyncio.to_thread(servers[0].stop)
                    servers.append(await asyncio.to_thread(serve))
        finally:
            await voice.aclose()
        return counts

    try:
        counts = asyncio.run(run())
    finally:
        for running in servers:
            running.stop()
    assert all(count > 0 for count in counts)
