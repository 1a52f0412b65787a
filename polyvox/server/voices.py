"""GET/POST/DELETE /v1/voices: the voices a request may use.

POST takes multipart/form-data with `id` (the new voice's id) and `file` (a recording of
at most `max_voice_seconds`, or a voice-state .safetensors), at most `max_voice_bytes`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import UploadFile

from polyvox.server.auth import require_api_key
from polyvox.server.bodies import read_body, replay
from polyvox.server.catalog import voice_aliases
from polyvox.server.errors import APIError
from polyvox.server.state import ServerState
from polyvox.server.voice_store import VoiceStore

router = APIRouter(dependencies=[Depends(require_api_key)])
FORM_OVERHEAD_BYTES = 64 * 1024  # multipart boundaries and the other fields


def _store(request: Request) -> VoiceStore:
    """The voice store; 503 until the model (and its saved voices) are loaded."""
    state: ServerState = request.app.state.polyvox
    _ = state.served
    assert state.voices is not None
    return state.voices


@router.get("/v1/voices")
async def list_voices(request: Request) -> dict[str, Any]:
    store = _store(request)
    return {"object": "list", "data": store.list(),
            "aliases": voice_aliases(store.served.voice_names())}


@router.get("/v1/voices/{voice_id}")
async def get_voice(voice_id: str, request: Request) -> dict[str, Any]:
    return _store(request).describe(voice_id)


@router.post("/v1/voices", status_code=201)
async def add_voice(request: Request) -> JSONResponse:
    store = _store(request)
    config = request.app.state.polyvox.config
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise APIError(415, "send multipart/form-data with the fields 'id' (the new voice's "
                       "id) and 'file' (a recording or a voice-state .safetensors)")
    limit = config.max_voice_bytes
    body = await read_body(request, limit + FORM_OVERHEAD_BYTES)
    try:
        form = await replay(request, body).form(max_files=1, max_fields=4)
    except Exception as error:  # noqa: BLE001 - python-multipart's errors vary by version
        raise APIError(400, f"malformed multipart form: {error}") from None
    voice_id, upload = form.get("id"), form.get("file")
    if not isinstance(voice_id, str):
        raise APIError(400, "the form needs an 'id' field: the new voice's id", param="id")
    if not isinstance(upload, UploadFile):
        raise APIError(400, "the form needs a 'file' field: a recording (WAV, FLAC, OGG, "
                       "MP3) or a voice-state .safetensors", param="file")
    data = await upload.read()
    if len(data) > limit:
        raise APIError(413, f"the file is {len(data)} bytes, over the {limit} byte limit",
                       param="file")
    description = await store.add(voice_id, data)
    return JSONResponse(description, status_code=201)


@router.delete("/v1/voices/{voice_id}")
async def delete_voice(voice_id: str, request: Request) -> dict[str, Any]:
    await _store(request).delete(voice_id)
    return {"id": voice_id, "object": "voice.deleted", "deleted": True}
