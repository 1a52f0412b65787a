"""`polyvox bench --url`: the benchmark as a real client of a running `polyvox serve`.

The same records and metrics as the in-process benchmark (driver.py), measured on the
client's clock over the network, so they include what a caller pays and the engine does
not see: HTTP, the WebSocket, admission queueing, the encoder, the event loop's turns.

    http  POST /v1/audio/speech, response_format pcm at the model's rate, streamed:
          `sent` is just before the request goes out, each body piece holding whole
          samples is a chunk (a piece splitting a sample carries its half byte over).
    ws    WS /v1/audio/stream, one session per request: configure, then the whole text and
          `end`; binary frames are the chunks. `sent` is when the text goes out (the
          server's own TTFA counts from there too), after the handshake, as for an agent
          that keeps a session open.

A request admission refuses (429/503; on the WebSocket an `error` event with code
queue_full, wait_too_long or not_ready) is recorded with its status and Retry-After and
counts as rejected, not as an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import ssl
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.console import Console

from polyvox.bench import capacity as capacity_search
from polyvox.bench import report
from polyvox.bench.metrics import summarize
from polyvox.bench.http1 import Connection, Response
from polyvox.bench.overload import describe, overload_report, run_overload
from polyvox.bench.records import RequestRecord
from polyvox.bench.server_view import Buckets, histogram_percentile, ttfa_buckets
from polyvox.bench.texts import pick_texts
from polyvox.bench.workloads import run_closed_loop, run_open_loop
from polyvox.plugins.protocol import retry_after_seconds

if TYPE_CHECKING:
    import httpx

READ_TIMEOUT_SECONDS = 120.0  # longest silence from the server before a request fails
WS_REFUSAL_STATUS = {"queue_full": 429, "wait_too_long": 429, "not_ready": 503}


def require_httpx() -> None:
    """Fail with the fix when the HTTP client library is missing."""
    try:
        import httpx  # noqa: F401
    except ImportError:
        raise RuntimeError("polyvox bench --url needs httpx, which is not installed: pip "
                           "install 'polyvox[bench]' (or pip install httpx)") from None


@dataclass(frozen=True)
class ServerInfo:
    """What GET /ready says about the server under test."""

    url: str
    model: str
    sample_rate: int  # the model's; audio is asked for at this rate, so none is resampled


class RemoteClient:
    """Speaks requests to one server over one transport; `speak` is a `workloads.Speak`.
    Use it as an async context manager (it closes its connections at the end).

    Each HTTP request borrows a connection of its own (one keep-alive connection,
    polyvox.bench.http1) from a pool that grows to the most requests in flight, so no
    request waits for a connection on the client side. One shared httpx pool would not do:
    it scans every connection it holds for each request it sends, and with 200 callers the
    benchmark measured itself (refusals answered in 2.7 s median, 83 a second, where 16
    callers saw 26 ms and 336); an httpx client per caller still cost ~0.5 ms of CPU per
    request, more than the server's refusal (session 33).
    """

    def __init__(self, info: ServerInfo, transport: str, api_key: str | None) -> None:
        if transport not in ("http", "ws"):
            raise ValueError(f"unknown transport {transport!r}: use http or ws")
        self.info, self.transport = info, transport
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._idle: list[Connection] = []  # connections no request holds now
        self._made: list[Connection] = []  # every connection made, closed at the end
        self._tls = ssl.create_default_context()  # shared: making one each is slow

    @property
    def num_http_clients(self) -> int:
        """HTTP connections made so far: the most HTTP requests in flight at once (or
        what `prepare` asked for)."""
        return len(self._made)

    async def prepare(self, count: int) -> None:
        """Have `count` HTTP connections open before a run, as an agent keeps its
        connections to the TTS server: opened inside a burst, in the one event loop every
        caller shares and on the server's cores, they would be measured as the requests'
        latency (docs/bench.md)."""
        if self.transport != "http":
            return
        while len(self._made) < count:
            self._idle.append(self._new_connection())
        await asyncio.gather(*(connection.connect() for connection in self._idle))

    async def __aenter__(self) -> RemoteClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        clients, self._made, self._idle = self._made, [], []
        for client in clients:
            await client.aclose()

    def _new_connection(self) -> Connection:
        """A connection, kept in `_made` to be closed at the end."""
        connection = Connection(self.info.url, self._tls, read_timeout=READ_TIMEOUT_SECONDS)
        self._made.append(connection)
        return connection

    @asynccontextmanager
    async def _http(self) -> AsyncIterator[Connection]:
        connection = self._idle.pop() if self._idle else self._new_connection()
        try:
            yield connection
        finally:
            self._idle.append(connection)

    async def server_ttfa(self) -> Buckets | None:
        """The server's TTFA histogram for this transport's endpoint (server_view.py);
        None when GET /metrics does not answer with one (a proxy in front that hides it,
        a server that is not polyvox). A cluster's ingress counts its streams as one
        server does."""
        import httpx

        endpoint = "speech" if self.transport == "http" else "websocket"
        try:
            async with new_http_client(self._tls) as http:
                response = await http.get(f"{self.info.url}/metrics", headers=self.headers)
        except httpx.HTTPError:  # the figure is optional: the run goes on without it
            return None
        if response.status_code != 200:
            return None
        try:
            return ttfa_buckets(response.text, endpoint) or None
        except ValueError:  # not a Prometheus exposition
            return None

    async def speak(self, text: str, seed: int, mode: str, concurrency: int,
                    request_id: str) -> RequestRecord:
        """One request, start to end, as a record (never raises for a failed request)."""
        record = RequestRecord(request_id, mode, concurrency, sent=time.monotonic(),
                               sample_rate=self.info.sample_rate, text=text)
        try:
            if self.transport == "http":
                await self._speak_http(record, seed)
            else:
                await self._speak_ws(record, seed)
        except Exception as error:  # recorded, counted as an error in the report
            record.error = repr(error)
        return record

    async def _speak_http(self, record: RequestRecord, seed: int) -> None:
        body = {"model": self.info.model, "input": record.text, "voice": "default",
                "response_format": "pcm", "sample_rate": self.info.sample_rate, "seed": seed}
        async with self._http() as http:
            record.sent = time.monotonic()
            await self._stream_http(http, record, body)

    async def _stream_http(self, http: Connection, record: RequestRecord,
                           body: dict[str, Any]) -> None:
        async with http.stream("POST", "/v1/audio/speech", json_body=body,
                               headers=self.headers) as response:
            record.status = response.status_code
            if response.status_code != 200:
                await response.aread()
                _record_refusal(record, retry_after_seconds(response.headers.get("retry-after-ms"),
                                                            response.headers.get("retry-after")),
                                _error_message(response))
                return
            record.sample_rate = int(response.headers.get("x-sample-rate",
                                                          self.info.sample_rate))
            num_odd_bytes = 0  # 16-bit samples may be split across two pieces
            async for piece in response.aiter_raw():
                arrived = time.monotonic()
                num_bytes = num_odd_bytes + len(piece)
                num_odd_bytes = num_bytes % 2
                if num_bytes // 2:
                    record.add_chunk(arrived, num_bytes // 2)
        record.finished = time.monotonic()

    async def _speak_ws(self, record: RequestRecord, seed: int) -> None:
        from websockets.asyncio.client import connect

        url = self.info.url.replace("http", "ws", 1) + "/v1/audio/stream"
        async with connect(url, subprotocols=["polyvox"],  # type: ignore[list-item]
                           additional_headers=self.headers, open_timeout=30) as socket:
            await socket.send(json.dumps({"type": "configure", "format": "pcm", "seed": seed}))
            configured = json.loads(await asyncio.wait_for(socket.recv(), READ_TIMEOUT_SECONDS))
            if configured["type"] != "configured":
                raise RuntimeError(f"configure was refused: {configured}")
            record.sample_rate = int(configured["sample_rate"])
            record.sent = time.monotonic()
            await socket.send(json.dumps({"type": "text", "text": record.text}))
            await socket.send(json.dumps({"type": "end"}))
            while True:
                message = await asyncio.wait_for(socket.recv(), READ_TIMEOUT_SECONDS)
                if isinstance(message, bytes):
                    record.add_chunk(time.monotonic(), len(message) // 2)
                    continue
                event = json.loads(message)
                if event["type"] == "done":
                    record.finished = time.monotonic()
                    record.status = 200
                    return
                if event["type"] == "error":
                    error = event["error"]
                    record.status = WS_REFUSAL_STATUS.get(
                        error.get("code"), 500 if error.get("type") == "server_error" else 400)
                    _record_refusal(record, retry_after_seconds(event.get("retry_after_ms"),
                                                                event.get("retry_after")),
                                    error.get("message"))
                    return


def _server_view(before: Buckets | None, after: Buckets | None) -> dict[str, Any]:
    """A run's TTFA as the server counted it (ms; None where it exports no histogram):
    beside the client's, the part of a caller's wait spent outside the server."""
    def ms(q: float) -> float | None:
        if before is None or after is None:
            return None
        seconds = histogram_percentile(before, after, q)
        return None if seconds is None else 1000 * seconds

    return {"server_ttfa_p50_ms": ms(50), "server_ttfa_p90_ms": ms(90)}


def _record_refusal(record: RequestRecord, retry_after: float | None,
                    message: str | None) -> None:
    """A request the server did not serve: a refusal (kept apart, `finished` when it was
    answered), else an error."""
    record.finished = time.monotonic()
    if record.is_rejected:
        record.retry_after = retry_after
    else:
        record.error = f"HTTP {record.status}: {message}"


def _error_message(response: httpx.Response | Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200]


def new_http_client(tls: ssl.SSLContext | None = None) -> httpx.AsyncClient:
    """An httpx client for the benchmark: no pool wait, READ_TIMEOUT_SECONDS of silence."""
    require_httpx()
    import httpx

    timeout = httpx.Timeout(10.0, read=READ_TIMEOUT_SECONDS, pool=None)
    return httpx.AsyncClient(timeout=timeout, verify=tls or ssl.create_default_context())


@asynccontextmanager
async def connect_client(url: str, transport: str,
                         api_key: str | None) -> AsyncIterator[RemoteClient]:
    """A client of the server at `url`, once GET /ready says it takes requests."""
    require_httpx()
    import httpx

    url = url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with new_http_client() as http:
        try:
            response = await http.get(f"{url}/ready", headers=headers)
        except httpx.TransportError as error:
            raise ValueError(f"cannot reach the server at {url} ({error!r}): start it with "
                             "`polyvox serve`, or check --url") from None
        if response.status_code == 401:
            raise ValueError(f"{url} needs an API key: pass --api-key (or set "
                             "POLYVOX_API_KEY)")
        if response.status_code != 200:
            raise ValueError(f"{url} is not ready (HTTP {response.status_code}: "
                             f"{_error_message(response)}); retry once the model is loaded")
        ready = response.json()
    info = ServerInfo(url, str(ready["model"]), int(ready["sample_rate"]))
    async with RemoteClient(info, transport, api_key) as client:
        yield client


# --- the run ------------------------------------------------------------------------------


def run_remote_bench(args: argparse.Namespace) -> int:
    """`polyvox bench --url`: closed loop at each --concurrency, open loop with --rate,
    real-time capacity with --capacity, the overload run with --overload; one table and
    one JSON, as the in-process benchmark (rows' mode: server-http or server-ws)."""
    if args.baseline:
        raise ValueError("--baseline runs pocket-tts in this process: drop it with --url")
    if args.plot:
        report.require_matplotlib()
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    console = Console()
    if not console.is_terminal:  # logs and pipes: not squeezed into 80 columns
        console = Console(width=200)
    mode = f"server-{args.transport}"
    pool = pick_texts(500, seed=args.seed)

    def texts(index: int) -> str:
        return pool[index % len(pool)]

    def row_for(records: list[RequestRecord], wall: float, concurrency: int,
                server: dict[str, Any]) -> dict[str, Any]:
        return summarize(records, wall, mode, concurrency, args.ttfa_slo_ms) | server

    async def seen_by_server(run: Awaitable[tuple[list[RequestRecord], float]],
                             ) -> tuple[list[RequestRecord], float, dict[str, Any]]:
        """A run's records and wall time, and its TTFA as the server counted it."""
        before = await client.server_ttfa()
        records, wall = await run
        return records, wall, _server_view(before, await client.server_ttfa())

    rows: list[dict[str, Any]] = []
    all_records: list[RequestRecord] = []
    capacity: dict[str, Any] = {"capacity": None, "capacity_runs": [], "capacity_probes": []}
    overload: dict[str, Any] | None = None
    async with connect_client(args.url, args.transport, args.api_key) as client:
        info, speak = client.info, client.speak
        console.print(f"benchmarking {info.model} at {info.url} over {args.transport}")
        await run_closed_loop(speak, texts, 1, 1, f"warmup-{mode}")
        for concurrency in [int(part) for part in args.concurrency.split(",") if part]:
            console.print(f"{mode} c={concurrency} ...")
            await client.prepare(concurrency)
            records, wall, server = await seen_by_server(
                run_closed_loop(speak, texts, concurrency, args.requests, mode))
            rows.append(row_for(records, wall, concurrency, server))
            all_records.extend(records)
        if args.rate:
            console.print(f"{mode} open loop at {args.rate:g}/s for {args.duration:g} s ...")
            records, wall, server = await seen_by_server(run_open_loop(
                speak, texts, args.rate, args.duration, mode, args.seed, args.burstiness))
            rows.append(row_for(records, wall, 0, server) | {"rate": args.rate})
            all_records.extend(records)
        if args.capacity or (args.overload and not args.overload_streams):
            console.print(f"searching the real-time capacity ({args.capacity_runs} run(s)) ...")
            found = await capacity_search.measure_capacity(
                lambda c, n: run_closed_loop(speak, texts, c, n, "capacity"),
                args.capacity_runs, args.requests, args.ttfa_slo_ms,
                on_probe=lambda probe: console.print(capacity_search.describe_probe(probe)))
            capacity = found.to_json()
            console.print(capacity_search.describe(capacity))
        if args.overload:
            base = args.overload_streams or capacity["capacity"] or 1
            num_streams = max(1, math.ceil(args.overload_factor * base))
            console.print(f"overload: {num_streams} streams for {args.overload_seconds:g} s ...")
            name = f"{mode}-overload"
            await client.prepare(num_streams)
            records, wall, server = await seen_by_server(
                run_overload(speak, texts, num_streams, args.overload_seconds, name))
            overload = overload_report(records, wall, num_streams, args.overload_seconds,
                                       args.ttfa_slo_ms, name)
            overload |= {"capacity": base, "factor": args.overload_factor} | server
            all_records.extend(records)
    report.print_table(rows, title=f"polyvox bench --url {info.url} ({info.model}, "
                       f"{args.transport})")
    if capacity["capacity"] is not None:
        console.print(capacity_search.describe(capacity))
    if overload is not None:
        console.print(describe(overload))
    payload = {"url": info.url, "transport": args.transport, "model": info.model,
               "sample_rate": info.sample_rate, "rows": rows, **capacity,
               "overload": overload}
    if args.json_path:
        report.write_json(args.json_path, payload)
    if args.plot:
        report.plot(rows, args.plot, all_records)
    return 0
