"""How intelligible is a distilled student, beside its teacher?

    python -m polyvox.train.evaluate [--run DIR | --weights FILE] [--config YAML]

Both voices speak the project's held-out sentences (polyvox.asr.SENTENCES, never in the
training data: sentences.held_out), whisper tiny.en transcribes each clip, and the table
gives per sentence the teacher's and the student's transcript, edits and WER, then both
corpus WERs and the clip lengths. The teacher is measured as in docs/asr.md (Piper joe,
its default noise, seed 0); the student with its config's defaults, seed 0.

`--run DIR` reads a training run's checkpoint (so it can judge a run in progress);
`--weights FILE` an exported student (model.safetensors); neither: the config's shipped
weights.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from polyvox.asr.intelligibility import transcribe_all
from polyvox.asr.sentences import SENTENCES
from polyvox.asr.wer import CorpusErrors, corpus_errors
from polyvox.models.joe_ar.network import DEFAULT_CONFIG


@dataclass(frozen=True)
class VoiceResult:
    """One voice over the sentences: transcripts, errors, clip lengths in seconds."""

    transcripts: list[str]
    errors: CorpusErrors
    seconds: list[float]


def judge(synthesize, sample_rate: int, transcriber, sentences: Sequence[str]) -> VoiceResult:
    clips = [synthesize(text) for text in sentences]
    transcripts = transcribe_all(transcriber, clips, sample_rate)
    return VoiceResult(transcripts, corpus_errors(sentences, transcripts),
                       [len(clip) / sample_rate for clip in clips])


def format_comparison(sentences: Sequence[str], teacher: VoiceResult,
                      student: VoiceResult) -> str:
    """A Markdown table, one row per sentence, then both corpus WERs."""
    lines = ["| # | sentence | teacher heard | WER | student heard | WER | s (T/S) |",
             "|---|---|---|---|---|---|---|"]
    rows = zip(sentences, teacher.transcripts, teacher.errors.utterances, teacher.seconds,
               student.transcripts, student.errors.utterances, student.seconds)
    for index, (text, t_heard, t_err, t_s, s_heard, s_err, s_s) in enumerate(rows, start=1):
        lines.append(f"| {index} | {text} | {t_heard} | {t_err.wer:.3f} | {s_heard} | "
                     f"{s_err.wer:.3f} | {t_s:.1f}/{s_s:.1f} |")
    for name, result in (("teacher", teacher), ("student", student)):
        errors = result.errors
        lines.append(f"\n{name} corpus WER = {errors.num_edits} / {errors.num_reference_words}"
                     f" = {errors.wer:.4f}")
    return "\n".join(lines)


def load_run_student(run: Path):
    """A training run's latest checkpoint as a servable student family."""
    from polyvox.models.joe_ar.family import load_student_family
    from polyvox.train.export import export_run

    weights, step = export_run(run, Path(tempfile.mkdtemp()))
    return load_student_family(weights=weights), step


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Whisper WER of a distilled student beside "
                                                 "its Piper teacher, per held-out sentence.")
    parser.add_argument("--run", type=Path, help="a training run directory (its checkpoint)")
    parser.add_argument("--weights", type=Path, help="an exported student's weights")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="student YAML")
    parser.add_argument("--sentences", type=int, default=len(SENTENCES),
                        help="the first N held-out sentences")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--temperature", default=None,
                        help="the student's sampling temperature (default: its config's); "
                             "a comma-separated list judges each in turn")
    parser.add_argument("--eos-threshold", type=float, default=None,
                        help="the student's EOS logit threshold (default: its config's)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from polyvox.asr.transcribe import Transcriber
    from polyvox.models.piper.model import PiperModel
    from polyvox.models.joe_ar.family import StudentParams, load_student_family

    if args.run is not None:
        family, step = load_run_student(args.run)
        print(f"student: {args.run} at step {step}")
    else:
        family = load_student_family(args.config, weights=args.weights)
    teacher = PiperModel.load()
    transcriber = Transcriber(threads=args.threads)
    sentences = SENTENCES[: args.sentences]
    start = time.perf_counter()
    teacher_result = judge(lambda text: teacher.synthesize(text, seed=0), teacher.sample_rate,
                           transcriber, sentences)
    temperatures = ([float(t) for t in args.temperature.split(",")] if args.temperature
                    else [family.student.default_temperature])
    for temperature in temperatures:
        params = StudentParams(seed=0, temperature=temperature,
                               eos_threshold=args.eos_threshold)
        print(f"\nstudent temperature {temperature}, EOS threshold "
              f"{family.eos_threshold(params)}")
        student_result = judge(lambda text: family.synthesize(text, params=params),
                               family.sample_rate, transcriber, sentences)
        print(format_comparison(sentences, teacher_result, student_result))
        print(f"synthesis + transcription: {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
