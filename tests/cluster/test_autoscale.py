"""Autoscaling on the engines' own signal: the policy on synthetic reports (a table), and
a real cluster that scales up under a burst and back down after it, its streams finishing
on the replica that stops."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import httpx
import pytest

pytest.importorskip("ray.serve")

from cluster_harness import cluster, wait_for  # noqa: E402
from server_harness import Server, start_server  # noqa: E402

from polyvox.cluster.autoscale import streams_policy, wanted_replicas  # noqa: E402


@pytest.mark.parametrize(("streams", "limits", "behind", "wanted"), [
    ({}, {}, {}, 1),  # nothing reported: the fewest
    ({"a": 0}, {"a": 4}, {}, 1),
    ({"a": 3}, {"a": 4}, {}, 1),  # 3 of 4: at the target utilization (0.75)
    ({"a": 4}, {"a": 4}, {}, 2),  # full: one more before anyone waits
    ({"a": 4, "b": 4}, {"a": 4, "b": 4}, {}, 3),
    ({"a": 1, "b": 1}, {"a": 4, "b": 4}, {}, 1),  # a lull: one replica is enough
    # listeners behind: that replica counts as full, whatever it runs
    ({"a": 1, "b": 0}, {"a": 4, "b": 4}, {"a": 1}, 2),
    # averaged reports are fractions
    ({"a": 2.5}, {"a": 4}, {"a": 0.2}, 2),
])
def test_wanted_replicas(streams: dict, limits: dict, behind: dict, wanted: int) -> None:
    assert wanted_replicas(streams, limits, behind) == wanted


def test_the_policy_reads_serves_aggregated_reports() -> None:
    ctx = SimpleNamespace(aggregated_metrics={"streams": {"a": 4.0}, "limit": {"a": 4.0},
                                              "behind": {"a": 0.0}},
                          policy_state={"kept": 1})
    assert streams_policy(ctx) == (2, {"kept": 1})


@pytest.fixture(scope="module")
def scaling_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """1 to 2 replicas, 2 streams each, a 1 s downscale delay."""
    running = start_server(tmp_path_factory.mktemp("autoscale"), "--replicas", "1",
                           "--max-replicas", "2", "--downscale-delay", "1",
                           "--max-streams", "2", "--max-queued", "8", "--max-wait", "120",
                           "--no-eos")
    yield running
    running.stop()


def test_a_burst_scales_up_and_the_scale_down_drains(scaling_cluster: Server) -> None:
    server = scaling_cluster
    first = cluster(server)["replicas"]
    assert len(first) == 1
    results: dict[int, httpx.Response] = {}

    def speak(index: int, sentences: int) -> None:
        text = " ".join(["This sentence keeps a stream busy for a while."] * sentences)
        results[index] = httpx.post(f"{server.url}/v1/audio/speech", timeout=300, json={
            "model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm",
            "seed": index})

    # a burst: 4 streams for one replica of 2. The first two fill it; the next two queue
    # until the new replica is up and start there, one of them outlasting the others.
    threads = [threading.Thread(target=speak, args=(i, 40 if i == 2 else 12))
               for i in range(4)]
    for thread in threads[:2]:
        thread.start()
    wait_for(server, lambda s: sum(r["streams"] for r in s["replicas"]) == 2)
    for thread in threads[2:]:
        thread.start()
    # the new replica shows as starting (Serve starts it) before it joins
    wait_for(server, lambda s: s["replicas_starting"] == 1, timeout=60)
    up = wait_for(server, lambda s: len(s["replicas"]) == 2 and all(
        r["state"] == "ready" for r in s["replicas"]), timeout=120)
    newest = next(r["id"] for r in up["replicas"] if r["id"] != first[0]["id"])
    # the short streams end; the long one still runs on the new replica, which Serve
    # stops first (the newest): it must finish there
    lull = wait_for(server, lambda s: sum(r["streams"] for r in s["replicas"]) == 1
                    or len(s["replicas"]) == 1, timeout=240)
    assert any(r["id"] == newest and r["streams"] == 1 for r in lull["replicas"]), lull
    down = wait_for(server, lambda s: len(s["replicas"]) == 1, timeout=240)
    assert down["replicas"][0]["id"] != newest
    for thread in threads:
        thread.join()
    assert all(results[i].status_code == 200 for i in range(4)), {
        i: r.text[:200] for i, r in results.items()}
    # every stream ran to its end: the long one (drained) as long again as its text asks
    seconds = {i: len(r.content) / 2 / 24000 for i, r in results.items()}
    assert seconds[2] > 2 * max(seconds[i] for i in (0, 1, 3)), seconds
    assert cluster(server)["failovers"] == 0
    assert down["replicas"][0]["state"] == "ready"
    time.sleep(0.5)
    assert httpx.post(f"{server.url}/v1/audio/speech", timeout=60, json={
        "model": "tts-1", "input": "Still serving.", "voice": "alloy"}).status_code == 200
