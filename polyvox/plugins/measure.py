"""Barge-in and plugin latency against a running server (figures in docs/agents.md).

    python -m polyvox.plugins.measure --url http://127.0.0.1:8000 [--streams 16] [--rounds 3]

- Barge-in: `--streams` WebSocket sessions speak a long text at once; each sends `cancel`
  at a random moment 0.2 to 1.5 s after its first audio. Per cancel, on the client's
  clock: to the last audio byte received after it (0 when none came), and to the
  `cancelled` acknowledgement, which the server sends once the engine has freed the
  request's KV blocks and decoder slot.
- Plugin overhead: time from the text to the first audio, for a bare WebSocket client, the
  Pipecat service (text frame into the service -> first audio frame out of it) and the
  LiveKit stream (push_text -> first audio), interleaved, `--rounds` x 5 each.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from typing import Any

import websockets

from polyvox.plugins.protocol import PolyvoxOptions

LONG = " ".join(f"Sentence {i} of a long answer keeps the stream busy for a while."
                for i in range(12))
SHORT = "Hello there, this is a short answer to measure the first audio."


async def _barge_in(url: str, seed: int, rng: random.Random) -> tuple[float, float]:
    options = PolyvoxOptions(url, seed=seed)
    async with websockets.connect(options.ws_url) as socket:
        await socket.send(options.configure())
        await socket.recv()
        await socket.send(json.dumps({"type": "text", "text": LONG}))
        while not isinstance(await socket.recv(), bytes):
            pass
        await asyncio.sleep(rng.uniform(0.2, 1.5))
        sent = time.perf_counter()
        await socket.send(json.dumps({"type": "cancel"}))
        last_audio = sent
        while True:
            message = await socket.recv()
            if isinstance(message, bytes):
                last_audio = time.perf_counter()
            elif json.loads(message)["type"] == "cancelled":
                return last_audio - sent, time.perf_counter() - sent


async def _bare(url: str) -> float:
    options = PolyvoxOptions(url)
    async with websockets.connect(options.ws_url) as socket:
        await socket.send(options.configure())
        await socket.recv()
        sent = time.perf_counter()
        await socket.send(json.dumps({"type": "text", "text": SHORT}))
        await socket.send(json.dumps({"type": "flush"}))
        while not isinstance(await socket.recv(), bytes):
            pass
        return time.perf_counter() - sent


async def _livekit(url: str) -> float:
    from polyvox.plugins.livekit import PolyvoxTTS

    voice = PolyvoxTTS(url=url)
    try:
        voice.prewarm()  # connected before the clock starts, as the bare client is
        await asyncio.sleep(0.5)
        stream = voice.stream()
        sent = time.perf_counter()
        stream.push_text(SHORT)
        stream.end_input()
        async for _ in stream:
            first = time.perf_counter() - sent
            break
        await stream.aclose()
    finally:
        await voice.aclose()
    return first


async def _pipecat(url: str) -> float:
    from pipecat.frames.frames import (
        EndFrame,
        Frame,
        LLMFullResponseEndFrame,
        LLMFullResponseStartFrame,
        LLMTextFrame,
        TTSAudioRawFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.workers.runner import WorkerRunner

    from polyvox.plugins.pipecat import PolyvoxTTSService

    first = asyncio.get_running_loop().create_future()
    sent: list[float] = []

    class Clock(FrameProcessor):
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, LLMTextFrame):
                sent.append(time.perf_counter())
            if isinstance(frame, TTSAudioRawFrame) and not first.done():
                first.set_result(time.perf_counter())
            await self.push_frame(frame, direction)

    tts = PolyvoxTTSService(url=url)
    worker = PipelineWorker(Pipeline([Clock(), tts, Clock()]),
                            params=PipelineParams(audio_out_sample_rate=24000),
                            idle_timeout_secs=None)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    await asyncio.sleep(0.5)  # connected, as the bare client is
    await worker.queue_frames([LLMFullResponseStartFrame(), LLMTextFrame(SHORT),
                               LLMFullResponseEndFrame()])
    done = await asyncio.wait_for(first, 30)
    await worker.queue_frame(EndFrame())
    await asyncio.wait_for(running, 30)
    return done - sent[0]


def _percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {1000 * statistics.median(ordered):.1f} ms, p99 {1000 * p99:.1f} ms"


async def main(url: str, streams: int, rounds: int) -> dict[str, Any]:
    rng = random.Random(0)
    to_last, to_ack = [], []
    for round_index in range(rounds):
        results = await asyncio.gather(*(_barge_in(url, round_index * streams + i, rng)
                                         for i in range(streams)))
        to_last += [r[0] for r in results]
        to_ack += [r[1] for r in results]
    print(f"barge-in, {streams} streams x {rounds} rounds: cancel -> last audio byte "
          f"{_percentiles(to_last)}; cancel -> engine freed (ack) {_percentiles(to_ack)}")
    first: dict[str, list[float]] = {"bare": [], "pipecat": [], "livekit": []}
    for _ in range(rounds * 5):
        first["bare"].append(await _bare(url))
        first["pipecat"].append(await _pipecat(url))
        first["livekit"].append(await _livekit(url))
    bare = statistics.median(first["bare"])
    for name, values in first.items():
        median = statistics.median(values)
        print(f"first audio, {name}: median {1000 * median:.1f} ms "
              f"(+{1000 * (median - bare):.1f} ms over bare; n={len(values)})")
    return {"to_last_audio": to_last, "to_ack": to_ack, "first_audio": first}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.url, arguments.streams, arguments.rounds))
