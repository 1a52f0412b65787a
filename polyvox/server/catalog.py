"""Names clients use for models and voices, and what they mean here.

Clients written for OpenAI send OpenAI model names (tts-1, ...) and voice names (alloy,
...): the model names mean the served model; an OpenAI voice name means the voice of that
id when one was added, else the default voice.
"""

from __future__ import annotations

from typing import Any

from polyvox.server.errors import APIError
from polyvox.serving import DEFAULT_VOICE

OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")
OPENAI_VOICES = ("alloy", "ash", "ballad", "cedar", "coral", "echo", "fable", "marin", "nova",
                 "onyx", "sage", "shimmer", "verse")


def resolve_model(name: str, served_name: str) -> str:
    if name in (served_name, "polyvox") or name in OPENAI_MODELS:
        return served_name
    raise APIError(400, f"unknown model {name!r}: this server serves {served_name!r} (OpenAI "
                   f"names {', '.join(OPENAI_MODELS)} mean it too)", param="model",
                   code="model_not_found")


def voice_id_of(voice: Any) -> str:
    """OpenAI sends a voice as a name or as {"id": name}."""
    if isinstance(voice, dict):
        voice = voice.get("id")
    if not isinstance(voice, str) or not voice:
        raise APIError(400, "voice must be a voice id (a string) or {\"id\": \"<voice id>\"}",
                       param="voice")
    return voice


def resolve_voice(voice: Any, registered: list[str]) -> str:
    """The registered voice a request asked for; 400 naming the choices otherwise."""
    name = voice_id_of(voice)
    if name in registered:
        return name
    if name in OPENAI_VOICES:
        return DEFAULT_VOICE
    raise APIError(400, f"unknown voice {name!r}: use one of {registered} (GET /v1/voices), "
                   f"an OpenAI voice name, or add it with POST /v1/voices", param="voice",
                   code="voice_not_found")


def voice_aliases(registered: list[str]) -> dict[str, str]:
    return {name: DEFAULT_VOICE for name in OPENAI_VOICES if name not in registered}
