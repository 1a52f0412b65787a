"""polyvox as a LiveKit Agents TTS (`pip install "polyvox[livekit]"`; docs/agents.md).

    session = AgentSession(stt=..., llm=..., tts=PolyvoxTTS(url="http://127.0.0.1:8000"))

`stream()` sends the LLM's text as it comes (polyvox finds clause ends itself) and yields
audio with word timings (`TimedString`s) as they are made; each flushed segment is one
polyvox utterance. `synthesize()` is one segment through the same stream.

One polyvox WebSocket per TTS instance (per conversation), kept in LiveKit's
`ConnectionPool` between turns. When the agent is interrupted LiveKit closes the stream:
the socket then gets `cancel`, and is handed to the next stream only once the server has
acknowledged it (the cut audio still in flight is dropped). A socket the server closed
(it restarted between turns) fails its first send, which LiveKit retries on a new one.
"""

from __future__ import annotations

import asyncio
import json

import websockets
from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    APIConnectionError,
    APIConnectOptions,
    APIError,
    tts,
    utils,
)
from livekit.agents.types import TimedString
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

from polyvox.plugins import protocol
from polyvox.plugins.protocol import PolyvoxOptions, ServerError

CANCEL_ACK_SECONDS = 5.0  # a socket whose cancel is not acknowledged by then is dropped


class PolyvoxTTS(tts.TTS):
    """Streaming TTS from a polyvox server, with aligned word timings and barge-in."""

    def __init__(self, *, url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 voice: str = "default", speed: float = 1.0, sample_rate: int = 24000,
                 seed: int = 0) -> None:
        """Args:
            url: the server (`http://host:8000`) or its WebSocket URL.
            api_key: the server's `--api-key`, if it has one.
            voice, speed, seed: as in docs/websocket.md's `configure`.
            sample_rate: the rate of the audio frames (the server resamples to it).
        """
        super().__init__(capabilities=tts.TTSCapabilities(streaming=True,
                                                          aligned_transcript=True),
                         sample_rate=sample_rate, num_channels=1)
        self.options = PolyvoxOptions(url, api_key, voice, speed, sample_rate, seed)
        self._pool = utils.ConnectionPool[ClientConnection](
            connect_cb=self._connect, close_cb=self._close)
        self._cancelling: asyncio.Task[None] | None = None  # a socket waiting for its ack

    @property
    def model(self) -> str:
        return "polyvox"

    @property
    def provider(self) -> str:
        return "polyvox"

    async def _connect(self, timeout: float) -> ClientConnection:
        websocket = await asyncio.wait_for(websockets.connect(
            self.options.ws_url, additional_headers=self.options.headers,
            subprotocols=[protocol.SUBPROTOCOL]), timeout)  # type: ignore[list-item]
        await websocket.send(self.options.configure())
        reply = json.loads(await asyncio.wait_for(websocket.recv(), timeout))
        if reply.get("type") != "configured":
            await websocket.close()
            raise APIError(str(ServerError(reply)), retryable=False)
        return websocket

    @staticmethod
    async def _close(websocket: ClientConnection) -> None:
        await websocket.close()

    def prewarm(self) -> None:
        self._pool.prewarm()

    def synthesize(self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
                   ) -> tts.ChunkedStream:
        return self._synthesize_with_stream(text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
               ) -> PolyvoxStream:
        return PolyvoxStream(tts=self, conn_options=conn_options)

    async def aclose(self) -> None:
        if self._cancelling is not None:
            await asyncio.gather(self._cancelling, return_exceptions=True)
        await self._pool.aclose()

    async def _socket(self, timeout: float) -> ClientConnection:
        """The conversation's socket (once a cancel on it is acknowledged), or a new one."""
        if self._cancelling is not None:
            await asyncio.gather(self._cancelling, return_exceptions=True)
        websocket = await self._pool.get(timeout=timeout)
        if websocket.state is not State.OPEN:  # the server went away
            self._pool.remove(websocket)
            websocket = await self._pool.get(timeout=timeout)
        return websocket

    def _cancel_on(self, websocket: ClientConnection) -> None:
        """Barge-in: `cancel`, then give the socket back once the server acknowledged it."""
        async def cancel() -> None:
            try:
                await websocket.send(protocol.CANCEL)
                async with asyncio.timeout(CANCEL_ACK_SECONDS):
                    async for message in websocket:
                        if isinstance(message, str) and json.loads(message)["type"] == "cancelled":
                            self._pool.put(websocket)
                            return
            except (ConnectionClosed, TimeoutError, OSError):
                pass
            self._pool.remove(websocket)

        self._cancelling = asyncio.ensure_future(cancel())


class PolyvoxStream(tts.SynthesizeStream):
    """The LLM's text in, polyvox's audio out: one polyvox utterance per segment."""

    def __init__(self, *, tts: PolyvoxTTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._polyvox = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        request_id = utils.shortuuid()
        output_emitter.initialize(request_id=request_id, sample_rate=self._polyvox.sample_rate,
                                  num_channels=1, mime_type="audio/pcm", stream=True)
        try:
            websocket = await self._polyvox._socket(self._conn_options.timeout)
        except (OSError, TimeoutError, websockets.InvalidHandshake) as error:
            raise APIConnectionError(f"cannot connect to {self._polyvox.options.url}") from error
        counts = {"sent": 0, "done": 0}
        input_done = asyncio.Event()

        async def send() -> None:
            is_open = False  # an utterance is taking text
            async for data in self._input_ch:
                if isinstance(data, self._FlushSentinel):
                    if is_open:
                        await websocket.send(protocol.FLUSH)
                        is_open = False
                    continue
                if not is_open:
                    self._mark_started()
                    counts["sent"] += 1
                    is_open = True
                await websocket.send(protocol.text(data))
            if is_open:
                await websocket.send(protocol.FLUSH)
            input_done.set()

        async def receive() -> None:
            segment = 0
            started = False
            while not (input_done.is_set() and counts["done"] == counts["sent"]):
                message = await websocket.recv()
                if isinstance(message, bytes):
                    output_emitter.push(message)
                    continue
                event = json.loads(message)
                kind = event["type"]
                if kind == "audio.start":
                    output_emitter.start_segment(segment_id=f"{request_id}-{segment}")
                    started = True
                elif kind == "words" and started:
                    output_emitter.push_timed_transcript([
                        TimedString(w["word"] + " ", start_time=w["start"], end_time=w["end"])
                        for w in event["words"]])
                elif kind == "utterance.done":
                    if not started:  # nothing to say (only whitespace)
                        output_emitter.start_segment(segment_id=f"{request_id}-{segment}")
                    output_emitter.end_segment()
                    segment, started = segment + 1, False
                    counts["done"] += 1
                elif kind == "error":
                    raise APIError(str(ServerError(event)), retryable=False)

        sender, receiver = asyncio.ensure_future(send()), asyncio.ensure_future(receive())
        interrupted = False
        try:
            await asyncio.wait([sender, receiver], return_when=asyncio.FIRST_EXCEPTION)
            if receiver.done():
                receiver.result()  # an error event, or the socket closed
            sender.result()
            if counts["done"] < counts["sent"]:
                await receiver
        except asyncio.CancelledError:  # interrupted: LiveKit closed the stream
            interrupted = True
            raise
        except ConnectionClosed as error:
            self._polyvox._pool.remove(websocket)
            raise APIConnectionError("polyvox closed the connection") from error
        except BaseException:
            self._polyvox._pool.remove(websocket)
            raise
        finally:
            for task in (sender, receiver):
                task.cancel()  # websockets' recv() may be cancelled safely
            await asyncio.gather(sender, receiver, return_exceptions=True)
            if interrupted:  # only once nothing else reads the socket
                self._polyvox._cancel_on(websocket)
        self._polyvox._pool.put(websocket)
