"""GET /: a small page to try the server: type text, pick a voice, hear it stream.

The page is static (it holds no data, so it needs no API key; it asks for one when the
server has one). It streams over the WebSocket, plays the PCM with Web Audio as it
arrives, and shows the time to first audio; `data-*` attributes on #stats carry the
numbers for tests.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter()


@cache
def _page() -> str:
    return resources.files("polyvox.server").joinpath("static/index.html").read_text("utf-8")


@router.get("/", include_in_schema=False)
async def index() -> HTMLResponse:
    return HTMLResponse(_page(), headers={"Cache-Control": "no-cache"})
