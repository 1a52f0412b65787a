"""The Piper family behind the engine's stage protocol.

Piper is not autoregressive: "prefill" runs phonemizer + ONNX front for a whole clause
and yields all of its latents z [T, 192] (`clause_latents_batch`), or runs stage 1 only and
hands them out in pieces (`start_clauses`, so a clause's first audio waits only for its
first frames); there is no step stage and no KV cache. The
decoder is the PyTorch HiFi-GAN run on windows: each chunk of N new frames is decoded
with up to `HISTORY` frames before it (kept in the request's decoder slot) and up to
`LOOKAHEAD` frames after it (still pending in the engine), then trimmed to its own
samples. Windows of equal shape batch exactly across requests. Each clause is its own
utterance (as in piper-tts): the decoder starts fresh per clause.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from polyvox.models.base import ClausePlan, FamilyTraits, KVSpec
from polyvox.models.piper.clause_latents import ClauseLatents
from polyvox.models.piper.front import Sentence, Stage1Output, make_generator
from polyvox.models.piper.hifigan import HiFiGan
from polyvox.models.piper.model import PiperModel
from polyvox.models.piper.phonemes import PhonemeWord
from polyvox.models.piper.word_timing import clause_word_frames
from polyvox.text.clauses import split_text

HISTORY = 10  # frames of z before a chunk (less breaks audibly; see docs/piper.md)
LOOKAHEAD = 10  # frames of z after a chunk


@dataclass(frozen=True)
class PiperParams:
    seed: int = 0
    speed: float = 1.0
    noise: bool = True
    sampler_steps: int = 1  # unused: no sampler

    def __post_init__(self) -> None:
        if not 0.25 <= self.speed <= 4.0:
            raise ValueError("speed must be between 0.25 and 4.0")


@dataclass(frozen=True)
class _Empty:
    k: torch.Tensor
    v: torch.Tensor
    length: int = 0


class PiperFamily:
    is_random = False
    # NOTE: every chunk is decoded with up to 20 frames of context, so longer chunks cost
    # less per frame (32 frames: +62%, 128: +16%); chunks grow as a listener's buffer does.
    # The first chunk (24 frames, 279 ms) costs ~10 ms more than an 8-frame one but covers
    # a step in which other requests' fronts run (~65 ms each).
    # The front's cost grows with the clause (~15 ms + 0.17 ms per frame): a text's first
    # clause ends at its first comma after 6 words, so that speech starts sooner.
    traits = FamilyTraits(
        is_autoregressive=False, resets_decoder_per_clause=True,
        decoder_lookahead=LOOKAHEAD, decoder_history=HISTORY,
        decoder_batch_frames=HiFiGan.CALL_FRAMES,  # bigger decode batches are split
        starts_clauses_in_pieces=True,
        preferred_settings={"first_chunk_frames": 24, "chunk_frames": 32,
                            "max_chunk_frames": 128, "first_clause_tokens": 6})

    def __init__(self, model: PiperModel) -> None:
        self.model = model
        self.audio = model.audio
        self.latent_dim = model.hifigan.num_channels
        self.kv_spec = KVSpec(num_layers=0, kv_heads=1, head_dim=1, dtype=torch.float32)

    def lower_precision(self, dtype: torch.dtype) -> None:
        """The decoder's weights in `dtype` (the front stays in onnxruntime, float32)."""
        self.model.hifigan.lower_precision(dtype)

    @property
    def sample_rate(self) -> int:
        return self.model.sample_rate

    def make_params(self, seed: int = 0, temperature: float | None = None,
                    speed: float = 1.0) -> PiperParams:
        return PiperParams(seed=seed, speed=speed)

    def empty_voice(self) -> _Empty:
        empty = torch.zeros(0, 0, 1, 1)
        return _Empty(empty, empty)

    # --- text ----------------------------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def split_like_reference(self, text: str, max_tokens: int) -> list[str]:
        return split_text(text, self.count_tokens, max_tokens)

    def plan_clause(self, text: str, params: PiperParams) -> ClausePlan:
        if not text.strip():
            raise ValueError("text is empty")
        return ClausePlan(torch.zeros(0, dtype=torch.long), 0, 0)

    def _phonemes(self, word: str) -> str:
        return "".join("".join(sentence) for sentence in self.model.phonemizer.phonemize(word))

    # --- stages ------------------------------------------------------------------------

    @torch.no_grad()
    def clause_latents(self, text: str, params: PiperParams,
                       generator: torch.Generator) -> torch.Tensor:
        """All latent frames of a clause, [T, 192] (espeak sentences concatenated)."""
        return self.clause_latents_batch([text], [params], [generator])[0]

    @torch.no_grad()
    def clause_latents_batch(self, texts: list[str], params: list[PiperParams],
                             generators: list[torch.Generator]) -> list[torch.Tensor]:
        """Every clause of an engine step at once: [T_i, 192] each, in order.

        The sentences of all clauses go through the front together (stage 1 batched); a
        clause's latents equal what `clause_latents` alone would give, whatever else is in
        the batch, and each generator draws the same noise in the same order.
        """
        return [clause.next() for clause in self.start_clauses(texts, params, generators)]

    @torch.no_grad()
    def start_clauses(self, texts: list[str], params: list[PiperParams],
                      generators: list[torch.Generator]) -> list[ClauseLatents]:
        """Stage 1 of every clause of a step (batched, noise drawn); no flow yet.

        Each clause's latents then come piece by piece from `ClauseLatents.next`, which
        runs the flow only over the frames asked for (plus 32 frames of context): the
        first 34 frames of a 400-frame clause cost a quarter of the whole. The pieces
        concatenate to `clause_latents`' result (~1e-6 relative), and the generators end
        as `clause_latents_batch` leaves them.
        """
        sentences, owners, words = [], [], []
        for clause, (text, request_params, generator) in enumerate(
                zip(texts, params, generators, strict=True)):
            scales = self.model.scales(request_params.speed, request_params.noise)
            for ids, sentence_words in self.model.phonemizer.text_to_ids_and_words(text):
                sentences.append(Sentence(ids, scales, generator))
                owners.append(clause)
                words.append(sentence_words)
        per_clause: list[list[Stage1Output]] = [[] for _ in texts]
        timed: list[list[tuple[list[PhonemeWord], torch.Tensor]]] = [[] for _ in texts]
        for clause, output, sentence_words in zip(owners, self.model.front.run_stage1(sentences),
                                                  words):
            per_clause[clause].append(output)
            timed[clause].append((sentence_words, output.durations))
        return [ClauseLatents(self.model.front, outputs, self.latent_dim,
                              clause_word_frames(text, sentences_of, self._phonemes))
                for text, outputs, sentences_of in zip(texts, per_clause, timed)]

    def decoder_state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"history": (self.latent_dim, HISTORY)}

    def new_decoder_state(self, batch_size: int = 1) -> dict[str, torch.Tensor]:
        return {"history": torch.zeros(batch_size, self.latent_dim, HISTORY)}

    @torch.no_grad()
    def decode(self, latents: torch.Tensor, state: dict[str, torch.Tensor],
               num_frames: int | None = None, history: int = 0) -> torch.Tensor:
        """latents [B, N + L, D]: N new frames then L lookahead frames; `history` frames of
        the slot's past are prepended. Returns PCM [B, N * hop] (new samples only)."""
        frames = latents.shape[1] if num_frames is None else num_frames
        z = latents.transpose(1, 2)  # [B, D, N + L]
        past = state["history"][:, :, HISTORY - history:] if history else z[:, :, :0]
        audio = self.model.hifigan(torch.cat([past, z], dim=2))  # [B, (h + N + L) * hop]
        hop = self.audio.samples_per_frame
        state["history"] = torch.cat([state["history"], z[:, :, :frames]], dim=2)[:, :, -HISTORY:]
        return audio[:, history * hop: (history + frames) * hop]

    # --- one request, offline (CLI) ----------------------------------------------------------

    def synthesize(self, text: str, seed: int = 0, speed: float = 1.0) -> torch.Tensor:
        return self.model.synthesize(text, seed=seed, speed=speed)

    def new_generator(self, seed: int) -> torch.Generator:
        return make_generator(seed)
