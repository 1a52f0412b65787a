"""A lean HTTP/1.1 client for the benchmark's callers: one keep-alive connection per
caller, a JSON request out, the status and headers in, the body streamed as it comes
(Content-Length, chunked, or until the server closes).

Why not httpx: in a burst every caller's request runs through the one event loop the
benchmark has, on the cores the server uses. httpx spent ~0.5 ms of CPU per request
there, more than the server's ~0.3 ms to refuse one (docs/perf.md, session 33), so a
burst of 90 callers measured the client as much as the server. This does only what the
benchmark asks of a connection.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 * 1024


class HTTPError(Exception):
    """The server's answer broke HTTP/1.1 (or the connection ended mid-answer)."""


class Response:
    """An answer whose body is read at most once: `aiter_raw` as it comes, or `aread`."""

    def __init__(self, status_code: int, headers: dict[str, str], body: AsyncIterator[bytes]
                 ) -> None:
        self.status_code, self.headers, self._body = status_code, headers, body
        self.content = b""

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        async for piece in self._body:
            yield piece

    async def aread(self) -> bytes:
        self.content = b"".join([piece async for piece in self._body])
        return self.content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


class Connection:
    """One keep-alive connection to the server at `base_url` (opened on first use, and
    again after the server closed it)."""

    def __init__(self, base_url: str, tls: ssl.SSLContext | None = None,
                 connect_timeout: float = 10.0, read_timeout: float = 60.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.tls = (tls or ssl.create_default_context()) if parts.scheme == "https" else None
        self.host_header = parts.netloc
        self.base_path = parts.path.rstrip("/")  # a server behind a path prefix
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def aclose(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            try:
                await writer.wait_closed()
            except (OSError, ssl.SSLError):
                pass

    @asynccontextmanager
    async def stream(self, method: str, path: str, json_body: Any = None,
                     headers: dict[str, str] | None = None) -> AsyncIterator[Response]:
        """Send one request, yield its answer; the body must be read inside the block (what
        is left unread closes the connection)."""
        reader, writer = await self._open()
        body = b"" if json_body is None else json.dumps(json_body).encode()
        lines = [f"{method} {self.base_path}{path} HTTP/1.1", f"Host: {self.host_header}",
                 f"Content-Length: {len(body)}", "Accept-Encoding: identity"]
        if json_body is not None:
            lines.append("Content-Type: application/json")
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        done, answer_headers = False, {}
        try:
            status, answer_headers = await self._read_head(reader)
            response = Response(status, answer_headers, self._body(reader, answer_headers))
            yield response
            done = await self._drained(response)
        finally:
            if not done or answer_headers.get("connection", "").lower() == "close":
                await self.aclose()

    async def connect(self) -> None:
        """Open the connection now (else the first request opens it)."""
        await self._open()

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None or self._reader.at_eof():
            await self.aclose()
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self.tls,
                                        limit=MAX_HEADER_BYTES),
                self.connect_timeout)
        return self._reader, self._writer

    async def _line(self, reader: asyncio.StreamReader) -> bytes:
        line = await asyncio.wait_for(reader.readline(), self.read_timeout)
        if not line.endswith(b"\n"):
            raise HTTPError("the connection ended mid-answer")
        return line.rstrip(b"\r\n")

    async def _read_head(self, reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
        status_line = (await self._line(reader)).decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise HTTPError(f"not an HTTP/1.1 status line: {status_line!r}")
        headers: dict[str, str] = {}
        while line := await self._line(reader):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return int(parts[1]), headers

    async def _body(self, reader: asyncio.StreamReader,
                    headers: dict[str, str]) -> AsyncIterator[bytes]:
        read = self._read_some
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while size := int((await self._line(reader)).split(b";")[0], 16):
                while size:
                    piece = await read(reader, size)
                    size -= len(piece)
                    yield piece
                await self._line(reader)  # the CRLF after the chunk
            while await self._line(reader):  # trailers, up to the empty line
                pass
        elif "content-length" in headers:
            left = int(headers["content-length"])
            while left:
                piece = await read(reader, left)
                left -= len(piece)
                yield piece
        else:  # until the server closes the connection
            while piece := await asyncio.wait_for(reader.read(65536), self.read_timeout):
                yield piece
            headers["connection"] = "close"

    async def _read_some(self, reader: asyncio.StreamReader, most: int) -> bytes:
        piece = await asyncio.wait_for(reader.read(min(most, 65536)), self.read_timeout)
        if not piece:
            raise HTTPError("the connection ended mid-body")
        return piece

    @staticmethod
    async def _drained(response: Response) -> bool:
        """Whether the answer's body was read to its end (so the connection can carry the
        next request)."""
        async for _ in response._body:
            return False
        return True
