"""polyvox as a Pipecat TTS service (`pip install "polyvox[pipecat]"`; docs/agents.md).

    tts = PolyvoxTTSService(url="http://127.0.0.1:8000", voice="default")
    pipeline = Pipeline([transport.input(), stt, user_aggregator, llm, tts,
                         transport.output(), assistant_aggregator])

One polyvox WebSocket per conversation (docs/websocket.md). Each Pipecat audio context
(an LLM turn, or a TTSSpeakFrame) is one polyvox utterance: its text goes out as the LLM
writes it (token mode by default: polyvox finds clause ends itself), its audio and word
timings come back as they are made, and the end of the turn sends `flush`. An
interruption sends `cancel`: the server stops the utterance and frees its engine memory,
and audio still in flight for it is dropped here. When the server goes away (a restart),
the contexts it was speaking end and the next text opens a new socket.

Utterances are numbered by the server in the order their first text arrives (0, 1, ...,
per socket); this service numbers them the same way, so every event and audio frame
(which belongs to the utterance of the last `audio.start`) finds its context.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from loguru import logger
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame
from pipecat.processors.frame_processor import FrameProcessorSetup
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, WebsocketTTSService
from pipecat.utils.types import NOT_GIVEN, NotGiven
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from polyvox.plugins import protocol
from polyvox.plugins.protocol import PolyvoxOptions, ServerError

CONNECT_TIMEOUT_SECONDS = 10.0


@dataclass
class PolyvoxTTSSettings(TTSSettings):
    """Runtime-updatable settings: `voice` (TTSSettings') and `speed` (0.25 to 4.0). A
    change takes effect from the next utterance (on a new socket)."""

    speed: float | None | NotGiven = field(default_factory=lambda: NOT_GIVEN)


class PolyvoxTTSService(WebsocketTTSService):
    """Streaming TTS from a polyvox server, with word timestamps and barge-in."""

    Settings = PolyvoxTTSSettings
    _settings: PolyvoxTTSSettings

    def __init__(self, *, url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 voice: str = "default", speed: float = 1.0, sample_rate: int | None = None,
                 seed: int = 0, settings: PolyvoxTTSSettings | None = None,
                 text_aggregation_mode: TextAggregationMode = TextAggregationMode.TOKEN,
                 **kwargs: Any) -> None:
        """Args:
            url: the server (`http://host:8000`) or its WebSocket URL.
            api_key: the server's `--api-key`, if it has one.
            voice, speed, seed: as in docs/websocket.md's `configure`.
            sample_rate: output rate; None takes the pipeline's (the server resamples).
            text_aggregation_mode: TOKEN (default) streams the LLM's tokens as they come;
                polyvox splits clauses itself. SENTENCE waits for whole sentences.
        """
        PolyvoxOptions(url, api_key, voice, speed, sample_rate, seed)  # check early
        store = self.Settings(model=None, voice=voice, language=None, speed=speed)
        if settings is not None:
            store.apply_update(settings)
        super().__init__(text_aggregation_mode=text_aggregation_mode, push_text_frames=False,
                         push_start_frame=True, pause_frame_processing=False,
                         sample_rate=sample_rate, settings=store, reconnect_on_error=False,
                         **kwargs)
        self._url, self._api_key, self._seed = url, api_key, seed
        self._receive_task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()  # a configured socket is open
        self._connect_lock = asyncio.Lock()
        self._needs_new_socket = False  # settings changed: reconfigure at the next utterance
        self._reset_utterances()

    def _reset_utterances(self) -> None:
        """A new socket: the server numbers its utterances from 0 again."""
        self._contexts: dict[int, str] = {}  # live utterance -> its audio context
        self._next_utterance = 0
        self._open_context: str | None = None  # the utterance still taking text
        self._playing: int | None = None  # the utterance whose audio is arriving

    @property
    def options(self) -> PolyvoxOptions:
        speed = self._settings.speed
        return PolyvoxOptions(self._url, self._api_key, str(self._settings.voice or "default"),
                              float(speed) if isinstance(speed, (int, float)) else 1.0,
                              self.sample_rate, self._seed)

    def can_generate_metrics(self) -> bool:
        return True

    # --- connection ---------------------------------------------------------------------

    async def setup(self, setup: FrameProcessorSetup) -> None:
        await super().setup(setup)
        await self._connect()

    async def _connect(self) -> None:
        await super()._connect()
        if self._receive_task is None:
            self._receive_task = self.create_task(self._receive_task_handler(self._report_error))
        try:
            await self._connect_websocket()
        except Exception as error:  # the first text tries again
            logger.warning(f"{self}: cannot connect to polyvox yet: {error}")

    async def _disconnect(self) -> None:
        await super()._disconnect()
        if self._receive_task is not None:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        await self._disconnect_websocket()

    async def _connect_websocket(self) -> None:
        async with self._connect_lock:
            if self._websocket is not None and self._websocket.state is State.OPEN \
                    and not self._needs_new_socket:
                return
            await self._disconnect_websocket()
            options = self.options
            websocket = await asyncio.wait_for(self._websocket_connect(
                options.ws_url, additional_headers=options.headers,
                subprotocols=[protocol.SUBPROTOCOL]), CONNECT_TIMEOUT_SECONDS)
            await websocket.send(options.configure(self.sample_rate))
            reply = json.loads(await asyncio.wait_for(websocket.recv(), CONNECT_TIMEOUT_SECONDS))
            if reply.get("type") != "configured":
                await websocket.close()
                raise ServerError(reply)
            self._websocket, self._needs_new_socket = websocket, False
            self._reset_utterances()
            self._connected.set()
            await self._call_event_handler("on_connected")

    async def _disconnect_websocket(self) -> None:
        self._connected.clear()
        websocket, self._websocket = self._websocket, None
        if websocket is not None:
            try:
                await websocket.close()
            except Exception as error:
                logger.debug(f"{self}: closing the socket: {error}")
            await self._call_event_handler("on_disconnected")

    async def _receive_messages(self) -> None:
        """Read every socket in turn; never returns (the task is cancelled at the end)."""
        while True:
            await self._connected.wait()
            websocket = self._websocket
            if websocket is None:
                self._connected.clear()
                continue
            try:
                async for message in websocket:
                    await self._handle_message(message)
            except ConnectionClosed as closed:
                logger.warning(f"{self}: polyvox closed the socket: {closed}")
            if websocket is self._websocket:  # the server went away: speak later on a new one
                self._connected.clear()
                self._websocket = None
                await self._close_connection_contexts()
                await self._call_event_handler("on_disconnected")

    async def _update_settings(self, delta: TTSSettings) -> dict[str, Any]:
        changed = await super()._update_settings(delta)
        if changed.keys() & {"voice", "speed"}:
            self._needs_new_socket = True
        return changed

    # --- text out -----------------------------------------------------------------------

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Send a piece of the context's text; its audio arrives on the receive task."""
        try:
            if context_id != self._open_context or self._websocket is None:
                if self._open_context is None and self._needs_new_socket:
                    await self._disconnect_websocket()
                await self._connect_websocket()
            assert self._websocket is not None
            if context_id != self._open_context:
                if self._open_context is not None:
                    await self._websocket.send(protocol.FLUSH)
                self._contexts[self._next_utterance] = context_id
                self._next_utterance += 1
                self._open_context = context_id
            await self._websocket.send(protocol.text(text))
            await self.start_tts_usage_metrics(text)
        except Exception as error:
            yield ErrorFrame(error=f"polyvox: cannot send text to {self._url}: {error}")
            yield TTSStoppedFrame(context_id=context_id)
            await self._disconnect_websocket()
            return
        yield None

    async def flush_audio(self, context_id: str | None = None) -> None:
        """The turn's text is complete: the server speaks what is pending now."""
        context_id = context_id or self._open_context
        if context_id is not None and context_id == self._open_context and self._websocket:
            self._open_context = None
            try:
                await self._websocket.send(protocol.FLUSH)
            except ConnectionClosed:
                pass  # the receive task ends the context

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        """Barge-in: one `cancel` stops every utterance of the socket (all contexts)."""
        await self.stop_all_metrics()
        if (self._contexts or self._open_context) and self._websocket is not None:
            self._contexts.clear()
            self._open_context = None
            try:
                await self._websocket.send(protocol.CANCEL)
            except ConnectionClosed:
                pass
        await super().on_audio_context_interrupted(context_id)

    # --- audio and events in --------------------------------------------------------------

    async def _handle_message(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            context_id = self._contexts.get(self._playing) if self._playing is not None else None
            if context_id is not None and self.audio_context_available(context_id):
                await self.append_to_audio_context(context_id, TTSAudioRawFrame(
                    message, self.sample_rate, 1, context_id=context_id))
            return  # else the audio of a cancelled utterance, still in flight: dropped
        event = json.loads(message)
        kind = event.get("type")
        utterance = event.get("utterance")
        context_id = self._contexts.get(utterance) if utterance is not None else None
        if kind == "audio.start":
            self._playing = utterance
        elif kind == "words" and context_id and self.audio_context_available(context_id):
            await self.add_word_timestamps([(w["word"], w["start"]) for w in event["words"]],
                                           context_id)
        elif kind == "utterance.done":
            self._contexts.pop(utterance, None)
            if context_id and self.audio_context_available(context_id):
                await self.append_to_audio_context(context_id,
                                                   TTSStoppedFrame(context_id=context_id))
                await self.remove_audio_context(context_id)
        elif kind == "error":
            await self.push_error(error_msg=str(ServerError(event)))
