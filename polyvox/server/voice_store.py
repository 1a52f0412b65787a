"""Voices added through the API: checked, made, registered with the engine, and kept on
disk so they survive a restart.

Layout: <data_dir>/voices/<model>/<id>.safetensors (a polyvox voice file: the voice
prompt's KV) and <id>.json (when and from what it was made). Ids are validated names
(letters, digits, '_' and '-'), never paths, and files are written whole (a temporary
file, then a rename).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
import torch

from polyvox.engine.engine import EngineError
from polyvox.engine.threads import run_single_threaded
from polyvox.models.pocket.voice import save_voice
from polyvox.server.errors import APIError
from polyvox.serving import Served, check_voice_id

log = logging.getLogger(__name__)


def looks_like_safetensors(data: bytes) -> bool:
    """safetensors: an 8-byte little-endian header length, then a JSON header."""
    if len(data) < 10:
        return False
    header_length = int.from_bytes(data[:8], "little")
    return 0 < header_length <= len(data) - 8 and data[8:9] == b"{"


class VoiceStore:
    def __init__(self, served: Served, data_dir: Path, max_seconds: float,
                 min_seconds: float) -> None:
        self.served = served
        self.directory = data_dir / "voices" / re.sub(r"[^A-Za-z0-9_.-]+", "_", served.name)
        self.max_seconds, self.min_seconds = max_seconds, min_seconds
        self.added: dict[str, dict[str, Any]] = {}  # id -> its description
        self._lock = asyncio.Lock()  # one change at a time (and one voice encoded at a time)

    def describe(self, voice_id: str) -> dict[str, Any]:
        if voice_id in self.added:
            return self.added[voice_id]
        if voice_id in self.served.builtin_voices:
            return {"id": voice_id, "object": "voice", "builtin": True}
        raise APIError(404, f"no voice {voice_id!r}", param="voice_id")

    def list(self) -> list[dict[str, Any]]:
        return [self.describe(name) for name in self.served.voice_names()]

    async def load(self) -> None:
        """Register the voices saved by earlier runs (a bad file is skipped, with a
        warning)."""
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob("*.safetensors")):
            try:
                check_voice_id(path.stem)
                prefix = await asyncio.to_thread(run_single_threaded,
                                                 self.served.voice_from_file, path)
                await self._register(path.stem, prefix)
            except (ValueError, EngineError, OSError) as error:
                log.warning("skipping saved voice %s: %s", path, error)
                continue
            meta = path.with_suffix(".json")
            description = _read_json(meta) or {}
            self.added[path.stem] = {**description, **_description(path.stem, None, None)}

    async def add(self, voice_id: str, data: bytes) -> dict[str, Any]:
        """A voice from a recording (any format libsndfile reads) or a voice state
        (.safetensors: a polyvox voice file or a pocket-tts export)."""
        try:
            check_voice_id(voice_id)
        except ValueError as error:
            raise APIError(400, str(error), param="id") from None
        if not self.served.supports_voice_cloning:
            raise APIError(400, f"{self.served.name} has fixed voices: adding one is not "
                           "supported by this model")
        async with self._lock:
            if voice_id in self.served.voice_names():
                raise APIError(409, f"voice {voice_id!r} exists: delete it first or pick "
                               "another id", param="id")
            self.directory.mkdir(parents=True, exist_ok=True)
            if looks_like_safetensors(data):
                prefix, source, seconds = await self._from_state(data), "voice_state", None
            else:
                audio, sample_rate = self._decode(data)
                seconds = round(len(audio) / sample_rate, 3)
                try:
                    prefix = await asyncio.to_thread(run_single_threaded,
                                                     self.served.voice_from_audio,
                                                     torch.from_numpy(audio), sample_rate,
                                                     voice_id)
                except ValueError as error:
                    raise APIError(400, f"cannot make a voice from this audio: {error}",
                                   param="file") from None
                source = "audio"
            description = _description(voice_id, source, seconds)
            path = self.directory / f"{voice_id}.safetensors"
            _write_atomically(path, lambda tmp: save_voice(prefix, tmp))
            _write_atomically(path.with_suffix(".json"),
                              lambda tmp: Path(tmp).write_text(json.dumps(description)))
            try:
                await self._register(voice_id, prefix)
            except EngineError as error:
                self._remove_files(voice_id)
                raise APIError(400, f"cannot register voice {voice_id!r}: {error}") from None
            self.added[voice_id] = description
            return description

    async def delete(self, voice_id: str) -> None:
        async with self._lock:
            if voice_id in self.served.builtin_voices:
                raise APIError(400, f"{voice_id!r} is built in and cannot be deleted",
                               param="voice_id")
            if voice_id not in self.added:
                raise APIError(404, f"no voice {voice_id!r}", param="voice_id")
            await self.served.unregister_voice(voice_id)
            del self.added[voice_id]
            self._remove_files(voice_id)

    # --- helpers -------------------------------------------------------------------------

    async def _register(self, voice_id: str, prefix: Any) -> None:
        await self.served.register_voice(voice_id, prefix)

    async def _from_state(self, data: bytes) -> Any:
        with tempfile.NamedTemporaryFile(dir=self.directory, suffix=".upload") as upload:
            upload.write(data)
            upload.flush()
            try:
                return await asyncio.to_thread(run_single_threaded, self.served.voice_from_file,
                                               Path(upload.name))
            except Exception as error:  # noqa: BLE001 - any unreadable upload is a 400
                raise APIError(400, f"not a usable voice state: {error}", param="file") from None

    def _decode(self, data: bytes) -> tuple[np.ndarray, int]:
        """Mono float32 samples and their rate, within the duration limits."""
        try:
            with soundfile.SoundFile(io.BytesIO(data)) as reader:
                sample_rate, frames = reader.samplerate, reader.frames
                if frames / sample_rate > self.max_seconds:
                    raise APIError(400, f"the recording is {frames / sample_rate:.1f} s long, "
                                   f"over the {self.max_seconds:g} s limit: trim it",
                                   param="file")
                audio = reader.read(dtype="float32", always_2d=True).mean(axis=1)
        except (soundfile.LibsndfileError, RuntimeError, TypeError) as error:
            raise APIError(400, f"cannot read the file as audio (WAV, FLAC, OGG or MP3) or "
                           f"as a voice state (.safetensors): {error}", param="file") from None
        if len(audio) / sample_rate < self.min_seconds:
            raise APIError(400, f"the recording is {len(audio) / sample_rate:.2f} s long, under "
                           f"the {self.min_seconds:g} s minimum", param="file")
        return np.ascontiguousarray(audio), sample_rate

    def _remove_files(self, voice_id: str) -> None:
        for suffix in (".safetensors", ".json"):
            (self.directory / f"{voice_id}{suffix}").unlink(missing_ok=True)


def _description(voice_id: str, source: str | None, seconds: float | None) -> dict[str, Any]:
    description: dict[str, Any] = {"id": voice_id, "object": "voice", "builtin": False}
    if source is not None:
        description.update(source=source, seconds=seconds, created_at=int(time.time()))
    return description


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_atomically(path: Path, write: Any) -> None:
    descriptor, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(descriptor)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
