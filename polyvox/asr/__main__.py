"""`python -m polyvox.asr [voice.onnx]`: the intelligibility report of a Piper voice.

Synthesizes `SENTENCES` (seed 0), transcribes them with whisper tiny.en and prints the
per-sentence table and corpus WER that docs/asr.md records.
"""

from __future__ import annotations

import sys
import time

from polyvox.asr.intelligibility import format_report, intelligibility
from polyvox.asr.sentences import SENTENCES
from polyvox.asr.transcribe import Transcriber


def main(argv: list[str]) -> None:
    from polyvox.models.piper.model import PiperModel

    model = PiperModel.load(argv[0] if argv else None)
    transcriber = Transcriber(threads=2)
    start = time.perf_counter()
    errors, transcripts = intelligibility(
        lambda text: model.synthesize(text, seed=0), model.sample_rate, transcriber
    )
    print(format_report(SENTENCES, transcripts, errors))
    print(f"synthesis + transcription: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
