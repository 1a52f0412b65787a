"""polyvox command line: say | models."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

DEMO_TEXT = ("Hello! This is polyvox, a streaming text to speech engine. "
             "It serves many voices at once, in real time.")


def _say(args: argparse.Namespace) -> int:
    import torch

    from polyvox.audio.wav import write_wav
    from polyvox.speak import Speaker

    torch.set_num_threads(max(1, args.threads)) if args.threads else None
    speaker = Speaker.load(args.model, weights=args.weights, tokenizer=args.tokenizer,
                           device=args.device, precision=args.precision,
                           chaining=args.chaining)
    if speaker.is_random:
        print(f"note: no weights found for {args.model}: it runs with random weights, so the "
              "audio will be noise. Pass --weights PATH (see README, 'Real Pocket TTS weights').",
              file=sys.stderr)
    voice = speaker.add_voice(args.voice) if args.voice else "default"
    started = time.perf_counter()
    audio = speaker.speak(args.text, voice=voice, seed=args.seed, temperature=args.temperature,
                          speed=args.speed, normalize=args.normalize)
    elapsed = time.perf_counter() - started
    write_wav(args.output, audio, speaker.sample_rate)
    seconds = audio.numel() / speaker.sample_rate
    print(f"wrote {Path(args.output).resolve()} ({seconds:.2f} s of audio at "
          f"{speaker.sample_rate} Hz, made in {elapsed:.2f} s, {seconds / max(elapsed, 1e-9):.1f}x "
          "real time)")
    return 0


def _train(args: argparse.Namespace) -> int:
    if args.what == "distill":
        from polyvox.train.distill import main as step
    elif args.what == "evaluate":
        from polyvox.train.evaluate import main as step
    elif args.what == "export":
        from polyvox.train.export import main as step
    elif args.what == "posteval":
        from polyvox.train.posteval import main as step
    elif args.what == "dpo":
        from polyvox.train.dpo import main as step
    elif args.what == "grpo":
        from polyvox.train.grpo import main as step
    elif args.what == "pointer":
        from polyvox.train.pointer import main as step
    else:
        from polyvox.train.teacher_data import main as step
    step(args.rest)
    return 0


def _models(args: argparse.Namespace) -> int:
    from polyvox.models.registry import model_names

    print("\n".join(model_names()))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from polyvox.config import PRECISIONS, add_chaining_argument
    from polyvox.models.registry import DEFAULT_MODEL

    parser = argparse.ArgumentParser(prog="polyvox", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    say = commands.add_parser("say", help="synthesize text to a WAV file")
    say.add_argument("text", nargs="?", default=DEMO_TEXT)
    say.add_argument("-o", "--output", default="out.wav")
    say.add_argument("--model", default=DEFAULT_MODEL, help=f"default {DEFAULT_MODEL}")
    say.add_argument("--weights", help="checkpoint file, directory or cached HF repo id")
    say.add_argument("--tokenizer", help="tokenizer file (when not next to the weights)")
    say.add_argument("--voice", help="voice: a reference WAV or a voice-state .safetensors")
    say.add_argument("--seed", type=int, default=0, help="sampling seed (as the API's seed)")
    say.add_argument("--temperature", type=float, default=None)
    say.add_argument("--speed", type=float, default=1.0, help="pace, as OpenAI's speed")
    say.add_argument("--no-normalize", dest="normalize", action="store_false",
                     help="speak the text as written (no reading of numbers, dates, ...)")
    say.add_argument("--device", default="cpu")
    say.add_argument("--precision", choices=PRECISIONS, default="float32")
    say.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    add_chaining_argument(say)
    say.set_defaults(func=_say)
    models = commands.add_parser("models", help="list model names")
    models.set_defaults(func=_models)
    from polyvox.bench.cli import add_bench_parser
    from polyvox.eval.cli import add_eval_parser
    from polyvox.server.cli import add_prefetch_parser, add_serve_parser

    add_bench_parser(commands)
    add_eval_parser(commands)
    add_serve_parser(commands)
    add_prefetch_parser(commands)
    train = commands.add_parser("train", help="train our own voices (see docs/distill.md)")
    train.add_argument("what", choices=["teacher-data", "distill", "evaluate", "export",
                                          "posteval", "dpo", "grpo", "pointer"])
    train.add_argument("rest", nargs=argparse.REMAINDER, help="options of that step")
    train.set_defaults(func=_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, FileNotFoundError, KeyError) as error:
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        print(f"error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
