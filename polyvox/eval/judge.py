"""One voice over an evaluation set: speak each sentence through the engine, transcribe it
with whisper tiny.en, score it.

    speaker = Speaker.load("piper/joe")
    run = judge(speaker, load_items("test"), Transcriber(threads=2), label="piper/joe")
    run.corpus("read").wer

Speech goes through `polyvox.speak.Speaker`, the server's path (normalizer on unless
`normalize=False`); every sentence is its own request, with the same `seed`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from polyvox.asr.wer import CorpusErrors, UtteranceErrors
from polyvox.eval.score import corpus, item_errors
from polyvox.eval.sets import EvalItem

if TYPE_CHECKING:
    from polyvox.asr.transcribe import Transcriber
    from polyvox.speak import Speaker

# A student's teacher, for `polyvox eval --teacher`: the voice it was distilled from.
TEACHERS = {"pocket/joe-ar": "piper/joe"}


@dataclass(frozen=True)
class Heard:
    """One sentence, spoken and transcribed."""

    item: EvalItem
    transcript: str
    errors: UtteranceErrors
    audio_seconds: float
    synthesis_seconds: float
    transcription_seconds: float


@dataclass(frozen=True)
class VoiceRun:
    """One voice (a model, normalizer on or off) over a list of items, in item order."""

    label: str  # how the report names it: "piper/joe", "piper/joe, normalizer off", ...
    model: str
    normalize: bool
    seed: int
    heard: tuple[Heard, ...]
    load_seconds: float = 0.0

    def corpus(self, kind: str = "all") -> CorpusErrors:
        """Pooled errors over the sentences of `kind` (read, service or all)."""
        return corpus([h.errors for h in self.heard if kind in ("all", h.item.kind)])

    def category(self, name: str) -> CorpusErrors:
        return corpus([h.errors for h in self.heard if name in h.item.categories])

    @property
    def synthesis_seconds(self) -> float:
        return sum(h.synthesis_seconds for h in self.heard)

    @property
    def transcription_seconds(self) -> float:
        return sum(h.transcription_seconds for h in self.heard)

    @property
    def audio_seconds(self) -> float:
        return sum(h.audio_seconds for h in self.heard)


def judge(speaker: Speaker, items: Sequence[EvalItem], transcriber: Transcriber, *,
          label: str | None = None, seed: int = 0, normalize: bool = True,
          temperature: float | None = None, speed: float = 1.0, load_seconds: float = 0.0,
          progress: TextIO | None = None) -> VoiceRun:
    """Speak, transcribe and score every item (at `temperature`, None: the model's
    default, and at `speed`); `progress` gets a line per sentence."""
    name = speaker.served.name
    label = label or (name if normalize else f"{name}, normalizer off")
    heard: list[Heard] = []
    for index, item in enumerate(items, start=1):
        start = time.perf_counter()
        audio = speaker.speak(item.text, seed=seed, normalize=normalize,
                              temperature=temperature, speed=speed)
        spoken = time.perf_counter()
        transcript = transcriber.transcribe(audio, speaker.sample_rate)
        transcribed = time.perf_counter()
        errors = item_errors(item, transcript)
        heard.append(Heard(item, transcript, errors, audio.numel() / speaker.sample_rate,
                           spoken - start, transcribed - spoken))
        if progress is not None:
            print(f"[{label}] {index}/{len(items)} {item.kind} {item.number}: "
                  f"{errors.num_edits}/{errors.num_reference_words} edits", file=progress,
                  flush=True)
    return VoiceRun(label, name, normalize, seed, tuple(heard), load_seconds)
