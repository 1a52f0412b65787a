"""Judge a student on what post-training is for (issue 25), through the engine, on the
dev split (tune here; report the test split only for the shipped weights):

    polyvox train posteval --weights W [--set dev] [--limit N] [--speeds 0.75,1.25,1.5]
                           [--paragraphs N] [--probes N] [--chainings pocket,chained,audio]
                           [--threads 2] [--json FILE]

- pace: each sentence spoken at speed 1 and at each speed s; the ratio
  duration(s) * s / duration(1) should be 1 (the target: median within ±7%), and the WER
  at s no worse than at 1 + 0.02;
- chained paragraphs: consecutive read sentences grouped 3-5 at a time (one fixed
  grouping, PARAGRAPH_SEED; `--seed` only changes how they are spoken), spoken
  with each clause in a fresh context ("pocket"), chained in one context ("chained") and
  chained on the earlier clauses' generated steps only ("audio"; `--chainings`):
  WER of each, and clauses heard twice (a sentence's first four words heard more often
  than the paragraph has them);
- a question, then a short spelled clause ("Is it K-O-W-A-L-S-K-I?"): questions from the
  training grammar (not the eval sets), surnames from a list written for this probe,
  spoken in each chaining mode; texts whose question is heard twice; then the same
  questions with three templates the exchange data never used ("Did you say ...?").
  Chained, joe-ar spoke the question again in place of the spelled clause
  (docs/posttrain.md, session 22);
- codes and long digit strings: the service lines with codes or phone numbers; a clip
  longer than 2x the teacher's for the same line is a loop.

Any model the registry knows can be judged (`--model piper/joe` checks the judge itself:
the teacher follows `speed` exactly).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from polyvox.asr.wer import normalize_for_wer, utterance_errors
from polyvox.config import CHAINING
from polyvox.eval.score import corpus, item_errors
from polyvox.eval.sets import EvalItem, load_items

LOOP_FACTOR = 2.0  # a clip this many times the teacher's is a loop
PACE_TOLERANCE = 0.07
PROBE_SEED = 4242  # the training grammar's questions for the spelled-clause probe
PROBE_TEMPLATES = ("Is it {}?",)  # a template the exchange data uses (docs/distill.md)
UNSEEN_TEMPLATES = ("Did you say {}?", "You said {}, correct?", "Spelled {}, right?")
PARAGRAPH_SEED = 0  # the paragraphs' sizes: one fixed set, whatever seed speaks them
SURNAMES = ("Kowalski", "Nguyen", "Okafor", "Lindqvist", "Marsh", "Patel", "Duarte",
            "Ferreira", "Haugen", "Ibarra", "Jovic", "Quinlan", "Sorensen", "Tamura", "Valdez",
            "Whitlock", "Abbott", "Castro", "Dunleavy", "Egan", "Fitch", "Garza", "Holm",
            "Keane", "Moreau", "Novak", "Oyelaran", "Pruitt", "Rhee", "Szabo")


@dataclass
class PaceRow:
    speed: float
    median_ratio: float  # duration(s) * s / duration(1): 1 is perfect pace
    within_band: float  # share of sentences whose ratio is within ±7%
    wer: float
    wer_at_one: float


@dataclass
class ChainRow:
    chaining: str
    wer: float
    repeated_clauses: int
    paragraphs: int


@dataclass
class Report:
    model: str
    weights: str | None
    split: str
    pace: list[PaceRow] = field(default_factory=list)
    chains: list[ChainRow] = field(default_factory=list)
    probes: list[ChainRow] = field(default_factory=list)  # repeated_clauses: questions heard twice
    unseen_probes: list[ChainRow] = field(default_factory=list)  # UNSEEN_TEMPLATES
    codes_wer: float | None = None
    loops: int = 0
    codes: int = 0


def paragraphs(items: Sequence[EvalItem], count: int, seed: int = 0) -> list[list[EvalItem]]:
    """`count` paragraphs of 3-5 consecutive read sentences (seeded group sizes)."""
    rng = random.Random(seed)
    groups, start = [], 0
    while len(groups) < count:
        size = rng.randint(3, 5)
        if start + size > len(items):
            break
        groups.append(list(items[start: start + size]))
        start += size
    return groups


def heard_twice(sentences: Sequence[str], transcript: str) -> int:
    """Sentences whose first four words are heard more often than the paragraph says them."""
    heard = " ".join(normalize_for_wer(transcript))
    text = " ".join(normalize_for_wer(" ".join(sentences)))
    repeated = 0
    for sentence in sentences:
        words = normalize_for_wer(sentence)[:4]
        if len(words) < 4:
            continue
        opening = " ".join(words)
        repeated += heard.count(opening) > text.count(opening)
    return repeated


def judge_pace(speaker: Any, transcriber: Any, items: Sequence[EvalItem],
               speeds: Sequence[float], seed: int = 0) -> list[PaceRow]:
    def run(speed: float) -> tuple[list[float], float]:
        seconds, errors = [], []
        for item in items:
            audio = speaker.speak(item.text, seed=seed, speed=speed)
            seconds.append(audio.numel() / speaker.sample_rate)
            errors.append(item_errors(item, transcriber.transcribe(audio,
                                                                   speaker.sample_rate)))
        return seconds, corpus(errors).wer

    base, wer_at_one = run(1.0)
    rows = []
    for speed in speeds:
        seconds, wer = run(speed)
        ratios = [s * speed / b for s, b in zip(seconds, base) if b > 0]
        within = sum(abs(r - 1) <= PACE_TOLERANCE for r in ratios) / max(1, len(ratios))
        rows.append(PaceRow(speed, statistics.median(ratios), within, wer, wer_at_one))
    return rows


def _judge_texts(speakers: dict[str, Any], transcriber: Any,
                 texts: Sequence[tuple[Sequence[str], Sequence[str]]],
                 seed: int = 0) -> list[ChainRow]:
    """Per speaker: WER over texts of several clauses, each (clauses, watched), spoken as
    one request, and how many of the watched clauses were heard twice."""
    rows = []
    for chaining, speaker in speakers.items():
        errors, repeated = [], 0
        for clauses, watched in texts:
            text = " ".join(clauses)
            transcript = transcriber.transcribe(speaker.speak(text, seed=seed),
                                                speaker.sample_rate)
            errors.append(utterance_errors(text, transcript))
            repeated += heard_twice(watched, transcript)
        rows.append(ChainRow(chaining, corpus(errors).wer, repeated, len(texts)))
    return rows


def judge_chains(speakers: dict[str, Any], transcriber: Any,
                 groups: Sequence[Sequence[EvalItem]], seed: int = 0) -> list[ChainRow]:
    texts = [[item.text for item in group] for group in groups]
    return _judge_texts(speakers, transcriber, [(text, text) for text in texts], seed)


def spelled_probe(count: int = 30,
                  templates: Sequence[str] = PROBE_TEMPLATES) -> list[tuple[str, str]]:
    """`count` (question, spelled clause) pairs: questions of 4-12 words from the training
    grammar, each followed by a surname spelled letter by letter in a clause made from
    `templates` in turn ("Is it K-O-W-A-L-S-K-I?")."""
    from polyvox.train.sentences import generate_sentences

    if not 1 <= count <= len(SURNAMES):
        raise ValueError(f"the probe has 1-{len(SURNAMES)} texts, got {count}")
    questions = []
    for text in generate_sentences(4000, seed=PROBE_SEED):
        if text.endswith("?") and text.count("?") == 1 and "." not in text \
                and 4 <= len(text.split()) <= 12:
            questions.append(text)
        if len(questions) == count:
            break
    return [(question, templates[index % len(templates)].format("-".join(name.upper())))
            for index, (question, name) in enumerate(zip(questions, SURNAMES))]


def judge_probe(speakers: dict[str, Any], transcriber: Any,
                pairs: Sequence[tuple[str, str]], seed: int = 0) -> list[ChainRow]:
    """Per chaining: WER over the probe, and the texts whose question was heard twice."""
    return _judge_texts(speakers, transcriber,
                        [((question, spelled), (question,)) for question, spelled in pairs],
                        seed)


def judge_codes(speaker: Any, teacher: Any, transcriber: Any,
                items: Sequence[EvalItem], seed: int = 0) -> tuple[float, int]:
    errors, loops = [], 0
    for item in items:
        audio = speaker.speak(item.text, seed=seed)
        reference = teacher.speak(item.text, seed=seed)
        loops += audio.numel() > LOOP_FACTOR * reference.numel()
        errors.append(item_errors(item, transcriber.transcribe(audio, speaker.sample_rate)))
    return corpus(errors).wer, loops


def format_report(report: Report) -> str:
    lines = [f"# {report.model} ({report.weights or 'shipped weights'}), {report.split} split",
             "", ("| speed | median duration x speed / duration at 1 | within ±7% | WER | "
                  "WER at 1 |"), "|---|---|---|---|---|"]
    lines += [f"| {r.speed} | {r.median_ratio:.3f} | {r.within_band:.0%} | {r.wer:.3f} | "
              f"{r.wer_at_one:.3f} |" for r in report.pace]
    lines += ["", "| clauses | WER | clauses heard twice | paragraphs |", "|---|---|---|---|"]
    lines += [f"| {r.chaining} | {r.wer:.3f} | {r.repeated_clauses} | {r.paragraphs} |"
              for r in report.chains]
    for rows, which in ((report.probes, "Is it"), (report.unseen_probes, "other")):
        if not rows:
            continue
        header = (f"| clauses | WER | a question, then a spelled clause ({which}): "
                  "question heard twice | texts |")
        lines += ["", header, "|---|---|---|---|"]
        lines += [f"| {r.chaining} | {r.wer:.3f} | {r.repeated_clauses} | {r.paragraphs} |"
                  for r in rows]
    if report.codes_wer is not None:
        lines += ["", (f"codes and digit strings: WER {report.codes_wer:.3f}, "
                       f"{report.loops} loops in {report.codes} lines")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="pocket/joe-ar")
    parser.add_argument("--weights", help="an export (its config.yaml beside it)")
    parser.add_argument("--set", dest="split", default="dev", choices=("dev", "test"))
    parser.add_argument("--limit", type=int, default=30, help="sentences for the pace rows")
    parser.add_argument("--speeds", default="0.75,1.25,1.5")
    parser.add_argument("--paragraphs", type=int, default=12)
    parser.add_argument("--probes", type=int, default=30,
                        help="question + spelled clause texts per template set (0: none)")
    parser.add_argument("--chainings", default="pocket,chained,audio",
                        help="the engine's chaining modes the paragraphs and probes compare")
    parser.add_argument("--context-window", type=int,
                        help="positions of earlier clauses a chained clause keeps (default: "
                        "the family's)")
    parser.add_argument("--no-codes", dest="codes", action="store_false",
                        help="leave out the codes row (and the teacher it needs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--head-draws", type=int,
                        help="noises averaged per step (default: the config's)")
    parser.add_argument("--json", dest="json_path", type=Path)
    args = parser.parse_args(argv)
    chainings = [mode for mode in args.chainings.split(",") if mode]
    if not chainings or set(chainings) - set(CHAINING):
        parser.error(f"--chainings takes modes of {CHAINING}, got {args.chainings!r}")
    import torch

    from polyvox.asr.transcribe import Transcriber
    from polyvox.eval.evaluate import set_head_draws
    from polyvox.speak import Speaker

    def load(**kwargs: Any) -> Speaker:
        speaker = Speaker.load(args.model, weights=args.weights, repeatable=True, **kwargs)
        if args.head_draws is not None:
            set_head_draws(speaker, args.model, args.head_draws)
        return speaker

    torch.set_num_threads(args.threads)
    transcriber = Transcriber(threads=args.threads)
    read = load_items(args.split, "read")
    report = Report(args.model, args.weights, args.split)
    speaker = load()
    speeds = [float(s) for s in args.speeds.split(",") if s]
    for speed in speeds:
        try:
            speaker.served.params(speed=speed)
        except ValueError as error:  # a student without a pace input
            print(f"no pace rows: {error}", file=sys.stderr)
            speeds = []
            break
    if speeds:
        report.pace = judge_pace(speaker, transcriber, read[: args.limit], speeds, args.seed)
    groups = paragraphs(read, args.paragraphs, PARAGRAPH_SEED)
    modes = {mode: load(chaining=mode, context_window=args.context_window)
             for mode in chainings}
    report.chains = judge_chains(modes, transcriber, groups, args.seed)
    if args.probes:
        report.probes = judge_probe(modes, transcriber, spelled_probe(args.probes), args.seed)
        report.unseen_probes = judge_probe(
            modes, transcriber, spelled_probe(args.probes, UNSEEN_TEMPLATES), args.seed)
    del modes
    codes = [] if not args.codes else [item for item in load_items(args.split, "service")
             if {"code", "phone"} & set(item.categories)]
    if codes:
        teacher = Speaker.load("piper/joe", repeatable=True)
        report.codes_wer, report.loops = judge_codes(speaker, teacher, transcriber, codes,
                                                     args.seed)
        report.codes = len(codes)
    print(format_report(report))
    if args.json_path:
        args.json_path.write_text(json.dumps(asdict(report), indent=2) + "\n")


if __name__ == "__main__":
    main()
