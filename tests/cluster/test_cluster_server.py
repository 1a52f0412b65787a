"""`polyvox serve --replicas 2`: the same API through the ingress, voices on every replica,
admission across the cluster, draining. A real server process, a real local Ray cluster,
real HTTP and WebSocket clients."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from typing import Any

import httpx
import numpy as np
import openai
import soundfile
import websockets
from cluster_harness import cluster, wait_for
from server_harness import SAMPLE_RATE, Server

LONG_TEXT = " ".join(["This sentence keeps a stream busy for a while."] * 6)


def speak(server: Server, text: str = "Hello there.", **extra: Any) -> httpx.Response:
    body = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm",
            **extra}
    return httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=120)


def test_openai_sdk_streams_speech_through_the_ingress(pocket_cluster: Server) -> None:
    client = openai.OpenAI(base_url=f"{pocket_cluster.url}/v1", api_key="unused",
                           max_retries=0)
    with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input="One path through the cluster.",
            response_format="wav") as response:
        data = response.read()
    audio, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    assert rate == SAMPLE_RATE and len(audio) > SAMPLE_RATE // 4
    assert np.abs(audio).max() > 0
    replicas = cluster(pocket_cluster)["replicas"]
    assert len(replicas) == 2 and all(r["state"] == "ready" for r in replicas)
    assert sum(r["streams_served"] for r in replicas) >= 1
    hop = cluster(pocket_cluster)["chunk_hop_ms"]  # replica -> ingress, per chunk
    assert hop["chunks"] >= 1 and 0 <= hop["p50"] <= hop["p99"]


def test_websocket_streams_text_in_and_audio_out(pocket_cluster: Server) -> None:
    """... with word timings: each client word once, in order, on the audio's timeline
    (the replica says which words each clause speaks; the ingress times them)."""
    pieces = ("Text arrives ", "in pieces, ", "and audio leaves. ")

    async def session() -> tuple[int, list[dict]]:
        num_bytes, events = 0, []
        async with websockets.connect(pocket_cluster.ws_url) as ws:
            await ws.send(json.dumps({"type": "configure", "model": "tts-1", "voice": "alloy",
                                      "format": "pcm", "word_timings": True}))
            for piece in pieces:
                await ws.send(json.dumps({"type": "text", "text": piece}))
            await ws.send(json.dumps({"type": "flush"}))
            await ws.send(json.dumps({"type": "end"}))
            async for message in ws:
                if isinstance(message, bytes):
                    num_bytes += len(message)
                else:
                    events.append(json.loads(message))
        return num_bytes, events

    num_bytes, events = asyncio.run(session())
    kinds = [event["type"] for event in events]
    assert "error" not in kinds, events
    assert kinds[0] == "configured" and "utterance.done" in kinds and kinds[-1] == "done"
    assert num_bytes > SAMPLE_RATE // 2  # more than a quarter second of 16-bit audio
    words = [w for e in events if e["type"] == "words" for w in e["words"]]
    assert [w["word"] for w in words] == "".join(pieces).split()
    assert all(a["end"] <= b["start"] + 1e-4 for a, b in zip(words, words[1:]))
    seconds = num_bytes / 2 / events[0]["sample_rate"]
    assert words[0]["end"] > 0 and abs(words[-1]["end"] - seconds) < 0.1


def test_a_voice_added_once_is_used_on_both_replicas(pocket_cluster: Server) -> None:
    rng = np.random.default_rng(0)
    recording = io.BytesIO()
    soundfile.write(recording, (0.1 * rng.standard_normal(SAMPLE_RATE * 2)).astype(np.float32),
                    SAMPLE_RATE, format="WAV")
    added = httpx.post(f"{pocket_cluster.url}/v1/voices", data={"id": "caller"},
                       files={"file": ("caller.wav", recording.getvalue(), "audio/wav")},
                       timeout=120)
    assert added.status_code == 201, added.text
    state = wait_for(pocket_cluster, lambda s: all("caller" in r["voices"]
                                                    for r in s["replicas"]), timeout=10)
    served_before = {r["id"]: r["streams_served"] for r in state["replicas"]}
    # two at once, one stream per replica: one lands on each
    results: list[httpx.Response] = []
    threads = [threading.Thread(target=lambda: results.append(
        speak(pocket_cluster, "A cloned voice, on every replica.", voice="caller")))
        for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.status_code for r in results] == [200, 200], [r.text for r in results]
    served_after = {r["id"]: r["streams_served"] for r in cluster(pocket_cluster)["replicas"]}
    assert all(served_after[i] == served_before[i] + 1 for i in served_before), (
        served_before, served_after)


def test_admission_queues_across_the_cluster_then_refuses(pocket_cluster: Server) -> None:
    """One stream per replica, a queue of 2: two streams run (one per replica), the next
    two queue and each starts on whichever replica frees first, the fifth gets 429."""
    results: dict[int, httpx.Response] = {}
    started: dict[int, float] = {}

    def run(index: int, text: str) -> None:
        began = time.monotonic()
        results[index] = speak(pocket_cluster, text, seed=index)
        started[index] = began

    long_ones = [threading.Thread(target=run, args=(i, LONG_TEXT)) for i in range(2)]
    for thread in long_ones:
        thread.start()
    wait_for(pocket_cluster, lambda s: sum(r["streams"] for r in s["replicas"]) == 2)
    queued = [threading.Thread(target=run, args=(i, "Queued, then spoken.")) for i in (2, 3)]
    for thread in queued:
        thread.start()
    deadline = time.monotonic() + 30
    while httpx.get(f"{pocket_cluster.url}/ready", timeout=30).json()["queued"] < 2:
        assert time.monotonic() < deadline, "the two requests never queued"
        time.sleep(0.02)
    refused = speak(pocket_cluster, "One too many.")
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"]["code"] == "queue_full"
    for thread in long_ones + queued:
        thread.join()
    assert all(results[i].status_code == 200 for i in range(4)), {
        i: r.text[:200] for i, r in results.items()}
    assert all(len(results[i].content) > 0 for i in range(4))
    replicas = cluster(pocket_cluster)["replicas"]
    assert all(r["streams"] == 0 for r in replicas)


def test_a_drained_replica_finishes_its_streams_and_takes_no_new_ones(
        pocket_cluster: Server) -> None:
    """(Runs last in this module: the drained replica stays drained.)"""
    results: list[httpx.Response] = []
    long_one = threading.Thread(target=lambda: results.append(speak(pocket_cluster,
                                                                     LONG_TEXT)))
    long_one.start()
    state = wait_for(pocket_cluster, lambda s: any(r["streams"] for r in s["replicas"]))
    busy = next(r for r in state["replicas"] if r["streams"])
    other = next(r for r in state["replicas"] if r["id"] != busy["id"])
    drained = httpx.post(f"{pocket_cluster.url}/v1/cluster/replicas/{busy['id']}/drain",
                         timeout=30)
    assert drained.status_code == 200 and drained.json()["state"] == "draining"
    # the other replica takes the next streams; none is refused while it has room
    for _ in range(3):
        assert speak(pocket_cluster, "Not on the drained one.").status_code == 200
    long_one.join()
    assert results[0].status_code == 200 and len(results[0].content) > SAMPLE_RATE
    after = {r["id"]: r for r in cluster(pocket_cluster)["replicas"]}
    assert after[busy["id"]]["state"] == "draining"
    assert after[busy["id"]]["streams_served"] == busy["streams_served"]
    assert after[other["id"]]["streams_served"] == other["streams_served"] + 3
    missing = httpx.post(f"{pocket_cluster.url}/v1/cluster/replicas/nope/drain", timeout=30)
    assert missing.status_code == 404
