"""The benchmark's own HTTP/1.1 client (polyvox.bench.http1) against a raw asyncio server
that frames its answers every way HTTP/1.1 allows: the body arrives whole, whatever the
framing and however it is split across writes, and keep-alive connections are reused."""

from __future__ import annotations

import asyncio
import json

import pytest

from polyvox.bench.http1 import Connection, HTTPError

BODY = bytes(range(256)) * 40  # 10,240 bytes


def _chunked(body: bytes) -> list[bytes]:
    """The body in chunks of uneven sizes, each written in pieces (size line, data split
    mid-way, CRLF), an extension on one size line, and a trailer."""
    writes, start = [], 0
    for size in (1, 700, 4096, 5000, 443):
        data = body[start: start + size]
        start += size
        writes += [f"{size:x}{';x=1' if size == 700 else ''}\r\n".encode(), data[:size // 2],
                   data[size // 2:] + b"\r\n"]
    assert start == len(body)
    return writes + [b"0\r\n", b"X-Trailer: 1\r\n\r\n"]


async def _serve(answers: list[tuple[bytes, list[bytes]]], connections: list[int],
                 requests: list[dict]) -> asyncio.AbstractServer:
    """A server that answers each request with the next (head, body writes)."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        while answers:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            fields = dict(line.split(": ", 1) for line in lines[1:] if line)
            body = await reader.readexactly(int(fields["Content-Length"]))
            requests.append({"line": lines[0], "fields": fields, "body": body})
            status, writes = answers.pop(0)
            writer.write(status)
            for piece in writes:
                await writer.drain()
                await asyncio.sleep(0.001)
                writer.write(piece)
            await writer.drain()
            if b"Connection: close" in status or b"Content-Length" not in status \
                    and b"chunked" not in status:
                break
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_bodies_arrive_whole_in_every_framing_on_one_kept_alive_connection() -> None:
    async def run() -> None:
        answers = [
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", _chunked(BODY)),
            (b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 27\r\nRetry-After: 2\r\n\r\n",
             [b'{"error": {"message": "x"}}']),
            (b"HTTP/1.1 200 OK\r\nContent-Length: 10240\r\n\r\n",
             [BODY[:3000], BODY[3000:]]),
            (b"HTTP/1.1 200 OK\r\n\r\n", [BODY[:5000], BODY[5000:]]),  # until it closes
            (b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", [b"new"]),
        ]
        connections: list[int] = []
        requests: list[dict] = []
        server = await _serve(answers, connections, requests)
        port = server.sockets[0].getsockname()[1]
        connection = Connection(f"http://127.0.0.1:{port}/prefix/")
        got = []
        for _ in range(5):
            async with connection.stream("POST", "/v1/x", json_body={"a": 1},
                                         headers={"Authorization": "Bearer k"}) as response:
                if response.status_code == 429:
                    await response.aread()
                    assert response.json()["error"]["message"] == "x"
                    assert response.headers["retry-after"] == "2"
                    got.append(response.status_code)
                else:
                    got.append(b"".join([piece async for piece in response.aiter_raw()]))
        await connection.aclose()
        server.close()
        assert got == [BODY, 429, BODY, BODY, b"new"]
        # the first three shared one connection; the close-delimited one ended it
        assert len(connections) == 2
        first = requests[0]
        assert first["line"] == "POST /prefix/v1/x HTTP/1.1"
        assert first["fields"]["Authorization"] == "Bearer k"
        assert json.loads(first["body"]) == {"a": 1}

    asyncio.run(run())


def test_a_body_cut_short_is_an_error_and_the_next_request_reconnects() -> None:
    async def run() -> None:
        answers = [(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n",
                    [b"only 20 bytes here.."]),
                   (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", [b"ok"])]
        connections: list[int] = []
        server = await _serve(answers, connections, [])
        port = server.sockets[0].getsockname()[1]
        connection = Connection(f"http://127.0.0.1:{port}")
        with pytest.raises(HTTPError, match="mid-body"):
            async with connection.stream("POST", "/x", json_body={}) as response:
                await response.aread()
        async with connection.stream("POST", "/x", json_body={}) as response:
            assert await response.aread() == b"ok"
        await connection.aclose()
        server.close()
        assert len(connections) == 2

    asyncio.run(run())


def test_only_http_urls() -> None:
    with pytest.raises(ValueError, match="not an http"):
        Connection("ws://127.0.0.1:1")
