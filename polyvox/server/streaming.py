"""A streaming HTTP response that always cleans up after itself.

Starlette's StreamingResponse stops iterating when the client goes away, but does not
close the iterator, and never starts it when the first send fails. Here the body runs
next to a watcher for the client's disconnect; whichever way the response ends (done,
client gone, error), `on_close` runs, so the engine request is aborted and the admission
turn given back within one engine step.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

log = logging.getLogger(__name__)


class StreamResponse(StreamingResponse):
    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]],
                 media_type: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(content, media_type=media_type, headers=headers)
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        failure: BaseException | None = None
        try:
            async with anyio.create_task_group() as group:

                async def stream() -> None:
                    nonlocal failure
                    try:
                        await self.stream_response(send)
                    except OSError:
                        pass  # the client went away mid-send
                    except Exception as error:  # noqa: BLE001 - re-raised below
                        failure = error
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                await self.listen_for_disconnect(receive)
                group.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
                await self._on_close()
        if failure is not None:
            # Headers are out: the only way left to tell the client is to break the
            # connection without the final chunk.
            raise failure
