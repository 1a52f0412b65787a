"""`polyvox bench --url`: the benchmark as a client of a real server process (the small
random-weights model of tests/server), over HTTP and the WebSocket, and its overload run
against a server with tiny admission limits."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from server_harness import MODEL, SAMPLE_RATE, Server, start_server  # noqa: E402

from polyvox.bench.metrics import request_metrics, summarize  # noqa: E402
from polyvox.bench.overload import overload_report, run_overload  # noqa: E402
from polyvox.bench.records import (  # noqa: E402
    RequestRecord,
    records_from_json,
    records_to_json,
)
from polyvox.bench.remote import connect_client  # noqa: E402
from polyvox.bench.workloads import run_closed_loop  # noqa: E402
from polyvox.cli import build_parser  # noqa: E402

TEXT = "Please remember to water the tomatoes before you leave for the weekend."
ROW_KEYS = {"mode", "concurrency", "requests", "errors", "rejected", "ttfa_p50_ms",
            "ttfa_p90_ms", "ttfa_p99_ms", "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms", "rtf_p50",
            "rtf_p90", "x_realtime_p50", "audio_seconds", "wall_seconds", "audio_throughput",
            "request_throughput", "underruns", "underrun_seconds", "viability",
            "chunk_viability", "goodput", "ttfa_slo_ms"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("bench-server"))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tight_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One stream at a time and no queue: a second caller is refused at once."""
    running = start_server(tmp_path_factory.mktemp("tight-server"), "--max-streams", "1",
                           "--max-queued", "0")
    yield running
    running.stop()


def _texts(index: int) -> str:
    return f"Sentence number {index} is spoken now."


async def _speak(url: str, transport: str, text: str, seed: int) -> RequestRecord:
    async with connect_client(url, transport, None) as client:
        return await client.speak(text, seed, f"server-{transport}", 1, "r0")


@pytest.mark.parametrize("seed", [0, 7])
def test_both_transports_stream_all_of_the_servers_audio(server: Server, seed: int) -> None:
    whole = httpx.post(f"{server.url}/v1/audio/speech", timeout=60, json={
        "model": "tts-1", "input": TEXT, "voice": "alloy", "response_format": "pcm",
        "seed": seed})
    assert whole.status_code == 200
    expected = len(whole.content) // 2  # 16-bit samples at 24 kHz, read in one piece
    for transport in ("http", "ws"):
        record = asyncio.run(_speak(server.url, transport, TEXT, seed))
        assert record.is_ok and record.status == 200, record
        assert record.sample_rate == SAMPLE_RATE
        assert sum(record.chunk_samples) == expected, transport
        assert record.sent <= record.chunk_times[0]
        assert record.chunk_times == sorted(record.chunk_times)
        assert record.finished is not None and record.finished >= record.chunk_times[-1]
        metrics = request_metrics(record)
        assert metrics.ttfa is not None and metrics.e2e is not None
        assert 0 < metrics.ttfa <= metrics.e2e
        assert metrics.audio_seconds == pytest.approx(expected / SAMPLE_RATE)


def test_a_closed_loop_run_gives_a_row_per_concurrency(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    args = build_parser().parse_args([
        "bench", "--url", server.url, "--transport", "ws", "--concurrency", "2",
        "--requests", "2", "--json", str(path)])
    assert args.func(args) == 0
    payload = json.loads(path.read_text())
    assert (payload["model"], payload["transport"]) == (MODEL, "ws")
    [row] = payload["rows"]
    assert ROW_KEYS <= set(row)
    assert (row["mode"], row["concurrency"], row["requests"]) == ("server-ws", 2, 4)
    assert (row["errors"], row["rejected"]) == (0, 0)
    assert row["audio_seconds"] > 0 and row["ttfa_p50_ms"] > 0
    # The server's own count of the same requests' first audio (its /metrics) starts
    # after the client sent and ends before the client hears: never later than the
    # client's, but for the width of the histogram bucket it is read from (<= 50 ms).
    assert 0 < row["server_ttfa_p90_ms"] <= row["ttfa_p90_ms"] + 50
    assert row["server_ttfa_p50_ms"] <= row["server_ttfa_p90_ms"]


@pytest.mark.parametrize("transport", ["http", "ws"])
def test_overload_refuses_the_excess_and_serves_the_rest(tight_server: Server,
                                                         transport: str) -> None:
    async def run() -> tuple[list[RequestRecord], float]:
        async with connect_client(tight_server.url, transport, None) as client:
            return await run_overload(client.speak, _texts, num_streams=3, seconds=2.0,
                                      max_retry_wait=0.3)

    records, wall = asyncio.run(run())
    report = overload_report(records, wall, 3, 2.0, ttfa_slo_ms=500)
    assert report["accepted"] > 0 and report["rejected"] > 0
    assert report["rejected_by_status"] == {"429": report["rejected"]}
    assert report["attempts"] == len(records) == report["accepted"] + report["rejected"]
    assert report["errors"] == 0  # a 429 is a refusal, not a failed stream
    assert report["ttfa_p90_ms"] is not None and report["viability"] is not None
    for record in records:
        if record.is_rejected:
            assert record.error is None and not record.chunk_samples
            assert record.retry_after is not None and record.retry_after >= 1
        else:
            assert record.is_ok and record.status == 200 and sum(record.chunk_samples) > 0
            assert request_metrics(record).ttfa is not None
    # the client waits the server's Retry-After-Ms (spread refusals), as OpenAI's clients
    # do, not the whole seconds
    assert any(record.retry_after % 1 for record in records if record.is_rejected)
    row = summarize(records, wall, "overload", 3, 500)
    assert (row["errors"], row["rejected"]) == (0, report["rejected"])


def test_refused_requests_are_neither_errors_nor_unviable() -> None:
    served = RequestRecord("a", "server-http", 2, sent=0.0, chunk_times=[0.1, 0.2],
                           chunk_samples=[2400, 2400], sample_rate=24000, finished=0.2,
                           status=200)
    refused = RequestRecord("b", "server-http", 2, sent=0.0, status=429, retry_after=1.0,
                            finished=0.004)
    row = summarize([served, refused], 1.0, "server-http", 2, 500)
    assert (row["requests"], row["errors"], row["rejected"]) == (2, 0, 1)
    assert row["refusal_p99_ms"] == pytest.approx(4.0)  # the refusal's time, not the stream's
    assert row["viability"] == 1.0
    failed = RequestRecord("c", "server-http", 2, sent=0.0, status=500, error="HTTP 500")
    assert summarize([served, failed], 1.0, "x", 2, 500)["errors"] == 1
    assert records_from_json(records_to_json([refused])) == [refused]  # saved runs keep it


def test_the_command_line_writes_the_json(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "cli.json"
    # NOTE: run as a user would, in a fresh process; the client must not import torch.
    script = ("import sys; from polyvox.cli import main; code = main(sys.argv[1:]); "
              "assert 'torch' not in sys.modules, 'the remote bench imported torch'; "
              "sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", script, "bench", "--url", server.url,
                           "--concurrency", "1", "--requests", "1", "--json", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "server-http" in done.stdout
    payload = json.loads(path.read_text())
    assert (payload["model"], payload["sample_rate"]) == (MODEL, SAMPLE_RATE)
    assert payload["capacity"] is None and payload["overload"] is None
    [row] = payload["rows"]
    assert (row["mode"], row["concurrency"], row["requests"], row["errors"]) == (
        "server-http", 1, 1, 0)
    assert row["ttfa_p50_ms"] > 0 and row["audio_seconds"] > 0


def test_an_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    from server_harness import free_port

    done = subprocess.run([sys.executable, "-m", "polyvox.cli", "bench", "--url",
                           f"http://127.0.0.1:{free_port()}", "--concurrency", "1"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "cannot reach the server" in done.stderr and "polyvox serve" in done.stderr


def test_an_open_loop_run_over_the_websocket(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "open.json"
    done = subprocess.run([sys.executable, "-m", "polyvox.cli", "bench", "--url", server.url,
                           "--transport", "ws", "--concurrency", "1", "--requests", "1",
                           "--rate", "4", "--duration", "1.5", "--json", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    rows = json.loads(path.read_text())["rows"]
    [open_row] = [row for row in rows if row.get("rate") == 4]
    # Poisson arrivals at 4/s for 1.5 s: some requests, each served over the WebSocket
    assert open_row["mode"] == "server-ws" and open_row["concurrency"] == 0
    assert open_row["requests"] >= 1 and open_row["errors"] == 0
    assert open_row["audio_seconds"] > 0 and open_row["ttfa_p50_ms"] > 0


def test_http_callers_each_hold_one_connection_reused_across_their_requests(
        server: Server) -> None:
    """A closed loop of 3 callers x 3 requests: 3 HTTP clients, each reused, so no caller's
    request scans the others' connections (httpx's shared pool does, per request)."""
    async def run() -> tuple[list[RequestRecord], list[int]]:
        async with connect_client(server.url, "http", None) as client:
            records, _ = await run_closed_loop(client.speak, _texts, 3, 3, "server-http")
            made = [client.num_http_clients]
            # connections opened before a run (as the benchmark's runs do): none during it
            await client.prepare(4)
            made.append(client.num_http_clients)
            more, _ = await run_closed_loop(client.speak, _texts, 4, 1, "server-http")
            return records + more, made + [client.num_http_clients]

    records, made = asyncio.run(run())
    assert len(records) == 13 and all(record.is_ok for record in records)
    assert made == [3, 4, 4]
