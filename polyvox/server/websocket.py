"""WS /v1/audio/stream: text in as it is written, audio out as it is made.

Client -> server, JSON text messages: `configure` (first, once), `text` (any number),
`flush` (end the current utterance), `cancel` (barge-in: stop every utterance not yet
done), `end` (end the session). Server -> client: JSON events (`configured`,
`audio.start`, `words`, `clause.done`, `utterance.done`, `cancelled`, `done`, `error`) and
binary frames holding the audio of the current utterance in the configured format. The
protocol is documented in docs/websocket.md.

Utterances are spoken one after the other. Each holds an admission turn from its first
text to its last audio; its text goes to the engine as it arrives, so the first clause
is spoken while later text is still being written. A malformed or out-of-order message
gets an `error` event and the session closes (1008); whatever it was generating is
aborted.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from polyvox.engine.engine import EngineError
from polyvox.server.auth import websocket_is_authorized
from polyvox.server.catalog import resolve_model, resolve_voice
from polyvox.server.encoders import Encoder, format_error, output_rate
from polyvox.server.errors import APIError, error_body
from polyvox.server.state import ServerState
from polyvox.server.word_timings import WordTimeline
from polyvox.server.ws_messages import Cancel, Configure, ProtocolError, TextDelta, parse, validated
from polyvox.server.ws_utterance import Utterance
from polyvox.text.sanitize import encodable

log = logging.getLogger(__name__)
router = APIRouter()
SUBPROTOCOL = "polyvox"
CLOSE_NORMAL, CLOSE_GOING_AWAY, CLOSE_POLICY = 1000, 1001, 1008
CLOSE_INTERNAL, CLOSE_TRY_LATER = 1011, 1013
# a refusal's waits: its HTTP header -> the error event's field (whole numbers)
RETRY_FIELDS = {"Retry-After": "retry_after", "Retry-After-Ms": "retry_after_ms"}
_session_ids = itertools.count(1)


@router.websocket("/v1/audio/stream")
async def audio_stream(websocket: WebSocket) -> None:
    state: ServerState = websocket.app.state.polyvox
    if not websocket_is_authorized(websocket, state.config.api_key):
        await websocket.close(code=CLOSE_POLICY, reason="missing or invalid API key")
        return
    offered = websocket.scope.get("subprotocols", [])
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    await Session(websocket, state).run()


class Session:
    """One connection. This task receives and checks messages and feeds the utterances'
    text; the speaker task speaks the utterances in order and sends their audio."""

    def __init__(self, websocket: WebSocket, state: ServerState) -> None:
        self.websocket, self.state = websocket, state
        self.session_id = f"ws-{next(_session_ids)}"
        self.settings: Configure | None = None
        self.voice = ""
        self.params: Any = None
        self.current: Utterance | None = None  # the utterance receiving text
        self.num_utterances = 0
        self.num_finished = 0  # utterances done or cancelled (they finish in order)
        self.speaking: Utterance | None = None  # the one the speaker task is on
        self.queue: asyncio.Queue[Utterance | None] = asyncio.Queue()
        self.speaker: asyncio.Task[None] | None = None
        self.is_closed = False
        self.is_speaking = False  # an utterance is between its admission and its last audio
        self._in_flight: asyncio.Future[None] | None = None  # the last unstoppable send
        self._send_lock = asyncio.Lock()

    async def run(self) -> None:
        self.speaker = asyncio.create_task(self._speak_all())
        try:
            await self._receive_all()
        except ProtocolError as error:
            self.state.metrics.bad_requests.labels("websocket").inc()
            await self.fail(error.message, CLOSE_POLICY, param=error.param, code=error.code)
        except WebSocketDisconnect:
            pass
        finally:
            if not self.speaker.done():
                self.speaker.cancel()
            await asyncio.gather(self.speaker, return_exceptions=True)

    # --- receiving -----------------------------------------------------------------------

    async def _receive_all(self) -> None:
        idle = self.state.config.ws_idle_seconds
        while not self.is_closed:
            try:
                message = await asyncio.wait_for(self.websocket.receive(), timeout=idle)
            except TimeoutError:
                # NOTE: an idle writer is let go, unless ended utterances are still being
                # spoken (their audio may take longer than the idle limit).
                if self.current is None and (self.is_speaking or not self.queue.empty()):
                    continue
                await self.close(CLOSE_GOING_AWAY, f"no message for {idle:g} s")
                return
            if message["type"] == "websocket.disconnect":
                return
            if message.get("text") is None:
                raise ProtocolError("binary frames carry audio from the server only: send "
                                    "JSON text messages")
            if await self._handle(parse(message["text"])):
                return

    async def _handle(self, message: dict[str, Any]) -> bool:
        """Act on one message; True when the session is over."""
        kind = message.get("type")
        if kind == "configure":
            await self._configure(message)
            return False
        if kind not in ("text", "flush", "cancel", "end"):
            raise ProtocolError(f"unknown message type {kind!r}: use configure, text, flush, "
                                "cancel or end", param="type")
        if self.settings is None:
            raise ProtocolError(f"{kind!r} before 'configure': configure the session first")
        if kind == "text":
            self._add_text(validated(message, TextDelta).text)
        elif kind == "flush":
            self._end_utterance()
        elif kind == "cancel":
            validated(message, Cancel)
            await self._cancel()
        else:
            self._end_utterance()
            await self.queue.put(None)
            assert self.speaker is not None
            await asyncio.gather(self.speaker, return_exceptions=True)
            if not self.is_closed:
                await self.send({"type": "done", "utterances": self.num_utterances})
                await self.close(CLOSE_NORMAL, "done")
            return True
        return False

    async def _configure(self, message: dict[str, Any]) -> None:
        if self.settings is not None:
            raise ProtocolError("the session is already configured: 'configure' comes once, "
                                "first")
        settings = validated(message, Configure)
        try:
            served = self.state.served
            if settings.model is not None:
                resolve_model(settings.model, served.name)
            self.voice = resolve_voice(settings.voice, served.voice_names())
            problem = format_error(settings.format)
            if problem:
                raise APIError(400, problem, param="format")
            self.params = self.state.params(settings.seed, settings.temperature,
                                            settings.speed)
        except APIError as error:
            raise ProtocolError(error.message, error.param, error.code) from None
        self.settings = settings
        await self.send({"type": "configured", "session": self.session_id, "model": served.name,
                         "voice": self.voice, "format": settings.format,
                         "sample_rate": output_rate(settings.format, served.sample_rate,
                                                    settings.sample_rate)})

    def _add_text(self, text: str) -> None:
        if self.current is None:
            self.current = Utterance(self.num_utterances, self._timeline())
            self.num_utterances += 1
            self.queue.put_nowait(self.current)
        limit = self.state.config.max_stream_chars
        if self.current.num_chars + len(text) > limit:
            raise ProtocolError(f"utterance {self.current.index} is over the limit of {limit} "
                                "characters: send 'flush' to end utterances sooner", "text")
        self.current.add(text)

    def _end_utterance(self) -> None:
        if self.current is not None:
            self.current.end()
            self.current = None

    def _timeline(self) -> WordTimeline | None:
        assert self.settings is not None
        if not self.settings.word_timings:
            return None
        served = self.state.served
        return WordTimeline(served.text_pipeline(self.settings.normalize),
                            served.sample_rate, served.samples_per_frame)

    async def _cancel(self) -> None:
        """Barge-in: stop every utterance not finished yet (the one speaking, those
        waiting their turn, the one receiving text), then acknowledge with `cancelled`.
        No audio of them follows the acknowledgement, and by then the engine has freed
        what they held: closing the stream queues its abort on the engine thread, whose
        commands run in order between steps, so once a later no-op command has run the
        abort has too (within one engine step)."""
        self._end_utterance()
        while not self.queue.empty():
            self.queue.get_nowait()
        assert self.speaker is not None
        self.speaker.cancel()
        await asyncio.gather(self.speaker, return_exceptions=True)
        if self._in_flight is not None:
            await asyncio.gather(self._in_flight, return_exceptions=True)
        try:
            await self.state.served.barrier()
        except APIError:
            pass  # shutting down: the engine is stopping anyway
        cancelled = list(range(self.num_finished, self.num_utterances))
        speaking = self.speaking
        num_samples = speaking.num_samples_sent if speaking and speaking.index in cancelled else 0
        rate = self._output_rate()
        self.num_finished = self.num_utterances
        self.speaker = asyncio.create_task(self._speak_all())
        await self.send({"type": "cancelled", "utterances": cancelled,
                         "audio_samples": num_samples,
                         "audio_seconds": round(num_samples / rate, 4)})

    def _output_rate(self) -> int:
        assert self.settings is not None
        served = self.state.served
        return output_rate(self.settings.format, served.sample_rate, self.settings.sample_rate)

    # --- speaking ------------------------------------------------------------------------

    async def _speak_all(self) -> None:
        while (utterance := await self.queue.get()) is not None:
            if not await self._speak(utterance):
                return

    async def _speak(self, utterance: Utterance) -> bool:
        """Generate and send one utterance; False when the session cannot go on."""
        assert self.settings is not None
        self.speaking = utterance
        # NOTE: an utterance of only whitespace, control or format characters ("", "\n",
        # NUL, zero-width spaces) speaks nothing, so it takes no turn and never reaches the
        # engine; it still gets its utterance.done.
        has_speech = await utterance.wait_for_speech()
        try:
            served = self.state.served
            encoder = Encoder(self.settings.format, served.sample_rate,
                              self.settings.sample_rate)
            ticket = await self.state.admit() if has_speech else None
        except APIError as error:
            await self.fail(error.message, CLOSE_TRY_LATER, code=error.code,
                            retry=error.headers)
            return False
        if ticket is None:
            try:
                await self._unstoppable(self._finish(utterance, encoder))
                return True
            except (WebSocketDisconnect, RuntimeError, OSError):
                return False  # the client is gone
        self.is_speaking = True
        timeline = utterance.timeline
        stream = self.state.start(utterance.pieces(), self.voice, self.params, ticket,
                                  "websocket", utterance.first_text_at,
                                  normalize=self.settings.normalize,
                                  word_timings=timeline is not None)
        started = False
        try:
            while (samples := await stream.next()) is not None:
                if stream.first_audio_at is not None and not started:
                    started = True
                    ttfa = stream.first_audio_at - utterance.first_text_at
                    await self.send({"type": "audio.start", "utterance": utterance.index,
                                     "ttfa_ms": round(1000 * ttfa, 1)})
                data = encoder.encode(samples)
                if data:
                    await self._unstoppable(self._send_audio(utterance, data, encoder.num_samples))
                if timeline is not None:
                    for event in timeline.add_audio(len(samples), stream.ends_clause,
                                                    stream.word_frames, stream.clause_words,
                                                    stream.restarts_clause):
                        await self.send({**event, "utterance": utterance.index})
                if stream.ends_clause:
                    await self.send({"type": "clause.done", "utterance": utterance.index,
                                     "clause": stream.clause_index})
            await self._unstoppable(self._finish(utterance, encoder))
            return True
        except asyncio.CancelledError:
            stream.outcome = stream.outcome or "cancelled"
            raise
        except EngineError as error:
            log.warning("websocket utterance failed: %s", error)
            await self.fail(f"generation failed: {error}", CLOSE_INTERNAL, kind="server_error")
            return False
        except (WebSocketDisconnect, RuntimeError, OSError):
            return False  # the client is gone
        finally:
            self.is_speaking = False
            await stream.close()

    async def _finish(self, utterance: Utterance, encoder: Encoder) -> None:
        tail = encoder.finish()
        if tail:
            await self._send_audio(utterance, tail, encoder.num_samples)
        if utterance.timeline is not None:
            for event in utterance.timeline.finish():
                await self.send({**event, "utterance": utterance.index})
        await self.send({"type": "utterance.done", "utterance": utterance.index,
                         "audio_seconds": round(encoder.num_samples / encoder.sample_rate, 3)})
        self.num_finished = utterance.index + 1

    # --- sending -------------------------------------------------------------------------

    async def send(self, event: dict[str, Any]) -> None:
        async with self._send_lock:
            if not self.is_closed:
                await self.websocket.send_text(json.dumps(event))

    async def _unstoppable(self, step: Coroutine[Any, Any, None]) -> None:
        """Run a send to its end even if the speaker is cancelled meanwhile: a cancel waits
        for it, so no frame is cut half sent, `cancelled` counts exactly the audio that
        went out, and an utterance is either done or cancelled, never both."""
        self._in_flight = asyncio.ensure_future(step)
        await asyncio.shield(self._in_flight)

    async def _send_audio(self, utterance: Utterance, data: bytes, num_samples: int) -> None:
        async with self._send_lock:
            if not self.is_closed:
                await self.websocket.send_bytes(data)
                utterance.num_samples_sent = num_samples

    async def fail(self, message: str, close_code: int, param: str | None = None,
                   code: str | None = None, kind: str = "invalid_request_error",
                   retry: Mapping[str, str] | None = None) -> None:
        """Send an error event and close. `retry`: a refusal's HTTP headers, whose waits
        the event carries as RETRY_FIELDS."""
        event: dict[str, Any] = {"type": "error", **error_body(message, kind, param, code)}
        for header, name in RETRY_FIELDS.items():
            if retry is not None and header in retry:
                event[name] = int(retry[header])
        try:
            await self.send(event)
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass
        await self.close(close_code, message)

    async def close(self, code: int, reason: str) -> None:
        async with self._send_lock:
            if self.is_closed:
                return
            self.is_closed = True
            if self.websocket.application_state is WebSocketState.CONNECTED:
                try:
                    # NOTE: a close reason is at most 123 bytes of UTF-8 (and may quote
                    # a lone surrogate the client sent).
                    short = encodable(reason).encode()[:123].decode(errors="ignore")
                    await self.websocket.close(code=code, reason=short)
                except (RuntimeError, OSError):
                    pass
