"""When each of the client's words is spoken in an utterance's audio (the WebSocket's
`words` events; the protocol is in docs/websocket.md).

The engine marks where each clause's audio ends (`AudioChunk.ends_clause`); `WordTracker`
says which client words each clause speaks. Within a clause a word's time comes from
the model where it knows it (`AudioChunk.word_frames`: Piper's phoneme durations, exact
to the frame) and is otherwise an estimate: the clause's audio spread over its spoken
(normalized) words in proportion to their length in characters, one more for the gap
after each. Autoregressive models speak at a fairly even rate within a clause, so the
estimate is off by a fraction of a word; clause boundaries are exact for every family.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from polyvox.text.pipeline import TextPipeline
from polyvox.text.words import ClauseWords, ClientWords, WordTracker


class WordTimeline:
    """One utterance: its text as it comes in, its audio as it goes out, and the `words`
    events that say when each client word is spoken (times in seconds from the start of
    the utterance's audio).

    With the engine's text pipeline, the timeline splits the text into clauses itself, as
    the engine does. Without one (a cluster ingress holds no model), each clause's words
    come with the audio that ends it, from the replica that split the text."""

    def __init__(self, pipeline: TextPipeline | None, sample_rate: int,
                 samples_per_frame: int) -> None:
        self.tracker = WordTracker(pipeline) if pipeline is not None else ClientWords()
        self.sample_rate, self.samples_per_frame = sample_rate, samples_per_frame
        self.clauses: deque[ClauseWords] = deque()  # spoken by the engine, audio to come
        self.num_samples = 0  # model-rate samples of the utterance's audio so far
        self.clause_start = 0  # ... where the clause being spoken began
        self.num_words_sent = 0  # client words already in an event
        self.last_end = 0.0

    def add_text(self, piece: str) -> None:
        self.clauses.extend(self.tracker.feed(piece))

    def end_text(self) -> None:
        self.clauses.extend(self.tracker.flush())

    def add_audio(self, num_samples: int, ends_clause: bool,
                  word_frames: tuple[tuple[int, int], ...] | None,
                  clause_words: ClauseWords | None = None,
                  restarts_clause: bool = False) -> list[dict[str, Any]]:
        """A chunk of audio (model-rate samples); the words of its clause once it ends.
        `clause_words`: that clause's words, when they come with the audio;
        `restarts_clause`: the chunk speaks its clause again from the beginning (a stream
        moved to another replica), so the clause's words are timed from here."""
        if restarts_clause:
            self.clause_start = self.num_samples
        self.num_samples += num_samples
        if clause_words is not None and ends_clause:
            clause = clause_words
        elif not ends_clause or not self.clauses:
            return []
        else:
            clause = self.clauses.popleft()
        spans = self._spans(clause, word_frames)
        self.clause_start = self.num_samples
        return self._words(clause, spans)

    def finish(self) -> list[dict[str, Any]]:
        """The end of the utterance: any client word not spoken yet (punctuation alone,
        a symbol the normalizer drops) is placed, zero-length, at the end."""
        words = self.tracker.words
        self.last_end = max(self.last_end, self.num_samples / self.sample_rate)
        timed = self._unspoken(len(words), words)
        return [{"type": "words", "clause": None, "words": timed}] if timed else []

    def _spans(self, clause: ClauseWords, word_frames: tuple[tuple[int, int], ...] | None
               ) -> list[tuple[float, float]]:
        """[start, end) seconds of each of the clause's spoken words."""
        start, end = self.clause_start, self.num_samples
        if word_frames is not None and len(word_frames) == len(clause.spoken):
            hop = self.samples_per_frame
            return [(min(start + a * hop, end) / self.sample_rate,
                     min(start + b * hop, end) / self.sample_rate) for a, b in word_frames]
        weights = [len(word) + 1 for word in clause.spoken]
        total = sum(weights) or 1
        spans, position = [], float(start)
        for weight in weights:
            length = (end - start) * weight / total
            spans.append((position / self.sample_rate, (position + length) / self.sample_rate))
            position += length
        return spans

    def _words(self, clause: ClauseWords, spans: list[tuple[float, float]]
               ) -> list[dict[str, Any]]:
        words = self.tracker.words
        timed: list[dict[str, Any]] = []
        for source, (start, end) in zip(clause.sources, spans):
            if source < self.num_words_sent:  # the rest of a word already sent: extend it
                if timed and timed[-1]["index"] == source:
                    timed[-1]["end"] = _seconds(max(end, timed[-1]["end"]))
                continue
            timed += self._unspoken(source, words)
            timed.append({"word": words[source], "index": source, "start": _seconds(start),
                          "end": _seconds(end)})
            self.num_words_sent = source + 1
            self.last_end = end
        return [{"type": "words", "clause": clause.index, "words": timed}] if timed else []

    def _unspoken(self, up_to: int, words: list[str]) -> list[dict[str, Any]]:
        """Client words before `up_to` that no spoken word came from."""
        at = _seconds(self.last_end)
        timed = [{"word": words[index], "index": index, "start": at, "end": at}
                 for index in range(self.num_words_sent, up_to)]
        self.num_words_sent = max(self.num_words_sent, up_to)
        return timed


def _seconds(value: float) -> float:
    return round(value, 4)
