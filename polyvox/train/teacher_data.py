"""Teacher data: the Piper joe voice run over generated sentences, kept for distillation.

    python -m polyvox.train.teacher_data --out DIR --sentences N [--noise] [--seed S]

For each sentence the teacher's phonemizer gives one id sequence per espeak sentence (an
utterance); for each utterance the front gives per-id durations and the student's target
latent [T, 192] at 86.13 frames/s, one of:

- `prior` (default): the prior's mean m_p expanded to frames (one vector per phoneme id,
  repeated for its duration). At noise 0 the teacher's flow maps it exactly to z, so the
  student predicts m_p and its decoder runs the teacher's flow, then HiFi-GAN;
- `z`: the flow's output, which HiFi-GAN decodes directly.

Utterances are written in shards of `shard_size` sentences:

    DIR/manifest.json            settings (a resumed run must use the same ones)
    DIR/shard-00000.safetensors  ids, durations [sum N] int16 + id_offsets [U + 1];
                                 latents [sum T, 192] float16 + frame_offsets [U + 1];
                                 source [U] (sentence index in the shard);
                                 metadata "texts": the shard's sentences (JSON)

Resumable: shards are written whole (temporary file, then rename) and a rerun skips the
shards already there. Each sentence's noise comes from its own generator seeded by
(seed, sentence index), so a shard is the same whichever run writes it. The default is
the noise-free teacher (noise scale and duration noise 0): the latents are then a function
of the text, the easiest target for a small student (docs/distill.md says why).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import safetensors.torch
import torch

from polyvox.models.joe_ar.network import SPEED_RANGE
from polyvox.train.sentences import GENERATOR_VERSION, generate_sentences
from polyvox.train.wide_vocab import load_wide_vocab

# The teacher's speed argument is drawn from here; the effective speeds this gives (the
# labels) span about SPEED_RANGE (docs/distill.md).
TEACHER_SPEEDS = (0.42, 2.9)
TARGETS = ("prior", "z")

if TYPE_CHECKING:
    from polyvox.models.piper.model import PiperModel

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class TeacherDataConfig:
    num_sentences: int
    seed: int = 0
    shard_size: int = 256
    noise: bool = False  # False: noise-free teacher; True: its default noise, seeded
    teacher: str = "en_US-joe-medium"
    target: str = "prior"  # the latent stored: the prior's mean ("prior") or z ("z")
    # Pace (issue 25): this share of the sentences is spoken at a speed drawn log-uniformly
    # from TEACHER_SPEEDS (the teacher's length scale divided by it), the rest at 1.0.
    # Piper's durations follow its speed less than in proportion (each id's frames are
    # rounded up: at speed 1.5 its audio is 1/1.33 as long, not 1/1.5), so each utterance
    # is labelled with its effective speed, its length at speed 1 over its length.
    varied_speed_share: float = 0.0
    generator: int = GENERATOR_VERSION  # polyvox.train.sentences grammar version
    speed_label: str = "effective"  # what an utterance's speed says (see above)
    teacher_speeds: tuple[float, float] = TEACHER_SPEEDS  # the teacher's speed draws
    # This share of the items are exchanges: a question, then a short spelled or confirming
    # clause, spoken as a paragraph (polyvox.train.sentences._exchange)
    exchange_share: float = 0.0

    def __post_init__(self) -> None:
        if self.num_sentences < 1 or self.shard_size < 1:
            raise ValueError("num_sentences and shard_size must be >= 1")
        if not 0.0 <= self.varied_speed_share <= 1.0:
            raise ValueError("varied_speed_share must be between 0 and 1")
        if not 0.0 <= self.exchange_share <= 1.0:
            raise ValueError("exchange_share must be between 0 and 1")
        low, high = self.teacher_speeds
        if not 0.0 < low <= high:
            raise ValueError(f"teacher_speeds must be 0 < low <= high, got {low}, {high}")
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {self.target!r}")

    @property
    def num_shards(self) -> int:
        return -(-self.num_sentences // self.shard_size)


class Utterance(NamedTuple):
    """One teacher utterance (one espeak sentence)."""

    ids: torch.Tensor  # [N] int64 phoneme ids (BOS PAD p PAD ... EOS)
    durations: torch.Tensor  # [N] int64 frames per id, summing to T
    latents: torch.Tensor  # [T, 192] float16: the prior's mean or z, per the data's target
    text: str  # the sentence (or paragraph) it came from
    speed: float = 1.0  # its pace: its length at speed 1 over its length (effective)
    part: int = 0  # which espeak sentence of `text` (a paragraph has several)


def shard_path(out: Path, index: int) -> Path:
    return out / f"shard-{index:05d}.safetensors"


def sentence_generator(seed: int, index: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + index)


def sentence_speed(config: TeacherDataConfig, index: int) -> float:
    """The pace sentence `index` is spoken at (its own seeded draw: any run agrees)."""
    rng = random.Random(f"speed:{config.seed}:{index}")
    if rng.random() >= config.varied_speed_share:
        return 1.0
    low, high = config.teacher_speeds
    return round(math.exp(rng.uniform(math.log(low), math.log(high))), 4)


def effective_speed(teacher: PiperModel, ids: list[int], frames: int, noise: bool) -> float:
    """An utterance's pace: its frames at speed 1 over its `frames` (noise-free teacher:
    exact; with noise, its duration noise is drawn afresh)."""
    from polyvox.models.piper.front import Sentence

    generator = torch.Generator().manual_seed(0)
    (stage1,) = teacher.front.run_stage1([Sentence(ids, teacher.scales(1.0, noise),
                                                   generator)])
    return round(int(stage1.durations.sum()) / frames, 4)


def teacher_utterances(teacher: PiperModel, text: str, noise: bool,
                       generator: torch.Generator, target: str = "prior",
                       speed: float = 1.0) -> list[Utterance]:
    """Run the teacher over one sentence (or paragraph: one utterance per espeak
    sentence) at `speed` (each utterance labelled with its effective speed);
    `target` picks the latent kept (TARGETS)."""
    from polyvox.models.piper.front import Sentence

    scales = teacher.scales(speed, noise)
    utterances = []
    for part, ids in enumerate(teacher.sentence_ids(text)):
        (stage1,) = teacher.front.run_stage1([Sentence(ids, scales, generator)])
        latents = (teacher.front.prior_mean(stage1) if target == "prior"
                   else teacher.front.run_flow(stage1))  # [C, T]
        if int(stage1.durations.sum()) != latents.shape[1]:
            raise RuntimeError(f"teacher durations do not sum to its frames for {text!r}")
        frames = int(stage1.durations.sum())
        pace = 1.0 if speed == 1.0 else effective_speed(teacher, ids, frames, noise)
        utterances.append(Utterance(torch.tensor(ids), stage1.durations.long(),
                                    latents.t().half().contiguous(), text, pace, part))
    return utterances


def write_shard(path: Path, texts: list[str], utterances: list[list[Utterance]]) -> None:
    """utterances[i] are the utterances of texts[i]. Written atomically."""
    flat = [(index, u) for index, group in enumerate(utterances) for u in group]
    id_lengths = torch.tensor([0] + [len(u.ids) for _, u in flat])
    frame_lengths = torch.tensor([0] + [u.latents.shape[0] for _, u in flat])
    tensors = {
        "ids": torch.cat([u.ids for _, u in flat]).to(torch.int16),
        "durations": torch.cat([u.durations for _, u in flat]).to(torch.int16),
        "id_offsets": torch.cumsum(id_lengths, 0),
        "latents": torch.cat([u.latents for _, u in flat]),
        "frame_offsets": torch.cumsum(frame_lengths, 0),
        "source": torch.tensor([index for index, _ in flat], dtype=torch.int32),
        "speeds": torch.tensor([u.speed for _, u in flat], dtype=torch.float64),
    }
    temporary = path.with_suffix(".tmp")
    safetensors.torch.save_file(tensors, str(temporary), metadata={"texts": json.dumps(texts)})
    temporary.rename(path)


def read_shard(path: Path) -> list[Utterance]:
    with safetensors.safe_open(str(path), "pt") as handle:
        texts = json.loads(handle.metadata()["texts"])
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    id_offsets, frame_offsets = tensors["id_offsets"].tolist(), tensors["frame_offsets"].tolist()
    latents = tensors["latents"] if "latents" in tensors else tensors["z"]  # older shards
    count = len(id_offsets) - 1
    speeds = tensors["speeds"].tolist() if "speeds" in tensors else [1.0] * count
    sources = tensors["source"].tolist()
    parts = [0] * count  # the utterance's place in its text: utterances are in order
    for i in range(1, count):
        parts[i] = parts[i - 1] + 1 if sources[i] == sources[i - 1] else 0
    return [
        Utterance(tensors["ids"][id_offsets[i]: id_offsets[i + 1]].long(),
                  tensors["durations"][id_offsets[i]: id_offsets[i + 1]].long(),
                  latents[frame_offsets[i]: frame_offsets[i + 1]],
                  texts[sources[i]], speeds[i], parts[i])
        for i in range(count)
    ]


def read_data(out: Path) -> list[Utterance]:
    """Every utterance of a data directory, shard by shard."""
    shards = sorted(Path(out).glob("shard-*.safetensors"))
    if not shards:
        raise FileNotFoundError(f"no teacher data in {out}: run python -m "
                                "polyvox.train.teacher_data --out DIR --sentences N first")
    return [u for shard in shards for u in read_shard(shard)]


def read_manifest(out: Path) -> dict:
    """A data directory's settings (`target` defaults to "z" for older data)."""
    path = Path(out) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"no {MANIFEST} in {out}: not a teacher data directory")
    found = json.loads(path.read_text())
    found.setdefault("target", "z")  # data written before targets existed
    found.setdefault("varied_speed_share", 0.0)  # ... before speeds
    found.setdefault("generator", 1)  # ... before the service grammar
    found.setdefault("speed_label", "nominal")  # ... before effective speeds
    found.setdefault("exchange_share", 0.0)  # ... before exchanges
    found["teacher_speeds"] = list(found.get("teacher_speeds", SPEED_RANGE))
    return found


def _check_manifest(out: Path, config: TeacherDataConfig) -> None:
    path = out / MANIFEST
    wanted = asdict(config)
    wanted["teacher_speeds"] = list(config.teacher_speeds)
    if path.exists():
        found = read_manifest(out)
        for key in ("seed", "shard_size", "noise", "teacher", "target",
                    "varied_speed_share", "generator", "speed_label", "teacher_speeds",
                    "exchange_share"):
            if found.get(key) != wanted[key]:
                raise ValueError(f"{out} holds data made with {key}={found.get(key)!r}, not "
                                 f"{wanted[key]!r}: use another --out or the same settings")
    path.write_text(json.dumps(wanted, indent=2) + "\n")


def relabel_speeds(out: Path, teacher: PiperModel | None = None) -> int:
    """Data written before effective speeds (speed_label "nominal"): label each utterance
    with its effective speed (the nominal one kept as `nominal_speeds`), shard by shard,
    each rewritten atomically; a rerun skips what is done. Returns utterances relabelled."""
    manifest = read_manifest(out)
    if manifest["noise"]:
        raise ValueError("relabelling needs noise-free data (its durations at speed 1 are "
                         "then exact)")
    count = 0
    for path in sorted(Path(out).glob("shard-*.safetensors")):
        with safetensors.safe_open(str(path), "pt") as handle:
            metadata = handle.metadata()
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
        if "nominal_speeds" in tensors or "speeds" not in tensors:
            continue
        if teacher is None:
            from polyvox.models.piper.model import PiperModel

            teacher = PiperModel.load(num_threads=1)
        offsets, frames = tensors["id_offsets"].tolist(), tensors["frame_offsets"].tolist()
        nominal = tensors["speeds"].clone()
        effective = nominal.clone()
        for i, speed in enumerate(nominal.tolist()):
            if speed != 1.0:
                ids = tensors["ids"][offsets[i]: offsets[i + 1]].long().tolist()
                effective[i] = effective_speed(teacher, ids, frames[i + 1] - frames[i], False)
                count += 1
        tensors["speeds"], tensors["nominal_speeds"] = effective, nominal
        temporary = path.with_suffix(".tmp")
        safetensors.torch.save_file(tensors, str(temporary), metadata=metadata)
        temporary.rename(path)
    manifest["speed_label"] = "effective"
    (Path(out) / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return count


def generate(out: Path, config: TeacherDataConfig, teacher: PiperModel | None = None,
             log: bool = True) -> list[Path]:
    """Write the missing shards of `config` under `out`; returns every shard path."""
    out.mkdir(parents=True, exist_ok=True)
    _check_manifest(out, config)
    sentences = list(generate_sentences(config.num_sentences, config.seed, config.generator,
                                        config.exchange_share))
    paths = []
    for shard in range(config.num_shards):
        path = shard_path(out, shard)
        paths.append(path)
        if path.exists():
            continue
        if teacher is None:
            from polyvox.models.piper.model import PiperModel

            teacher = PiperModel.load(num_threads=1)
        start = time.monotonic()
        first = shard * config.shard_size
        texts = sentences[first: first + config.shard_size]
        groups = [teacher_utterances(teacher, text, config.noise,
                                     sentence_generator(config.seed, first + offset),
                                     config.target, sentence_speed(config, first + offset))
                  for offset, text in enumerate(texts)]
        write_shard(path, texts, groups)
        if log:
            frames = sum(u.latents.shape[0] for group in groups for u in group)
            seconds = frames * teacher.hifigan.hop_length / teacher.sample_rate
            print(f"{path.name}: {len(texts)} sentences, {seconds:.0f} s of audio in "
                  f"{time.monotonic() - start:.1f} s", flush=True)
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run the Piper teacher over generated "
                                                 "sentences and store its latents.")
    parser.add_argument("--out", type=Path, required=True, help="data directory")
    parser.add_argument("--sentences", type=int, help="number of sentences (items)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shard-size", type=int, default=256)
    parser.add_argument("--noise", action="store_true",
                        help="the teacher's default noise (seeded) instead of none")
    parser.add_argument("--target", choices=TARGETS, default="prior",
                        help="the latent stored: the prior's mean (the student's decoder runs "
                             "the teacher's flow) or z (HiFi-GAN's input)")
    parser.add_argument("--varied-speed", type=float, default=0.0, metavar="SHARE",
                        help="share of sentences spoken at a random speed in "
                             f"{TEACHER_SPEEDS[0]}-{TEACHER_SPEEDS[1]} (log-uniform; each utterance "
                             "labelled with its effective speed); the rest at 1.0")
    parser.add_argument("--teacher-speeds", type=float, nargs=2, default=TEACHER_SPEEDS,
                        metavar=("LOW", "HIGH"),
                        help="the range --varied-speed draws the teacher's speed argument from "
                             f"(default {TEACHER_SPEEDS[0]} {TEACHER_SPEEDS[1]}); e.g. 1.35 2.6 "
                             "for fast speech only")
    parser.add_argument("--generator", type=int, default=GENERATOR_VERSION, choices=(1, 2, 3),
                        help="sentence grammar: 1 (joe-ar's first data), 2 (+ customer "
                             "service and paragraphs), 3 (2 with a wide vocabulary; the "
                             "train extra)")
    parser.add_argument("--exchanges", type=float, default=0.0, metavar="SHARE",
                        help="share of items that are a question then a short spelled or "
                             "confirming clause, spoken as a paragraph")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--relabel-speeds", action="store_true",
                        help="label the utterances of data made before effective speeds "
                             "with theirs (nothing else is generated)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.relabel_speeds:
        print(f"{relabel_speeds(args.out)} utterances relabelled")
        return
    if args.sentences is None:
        parser.error("--sentences is required")
    if args.generator >= 3:
        try:  # before any teacher is loaded: a missing extra costs nothing
            load_wide_vocab()
        except RuntimeError as error:
            parser.error(str(error))
    config = TeacherDataConfig(args.sentences, args.seed, args.shard_size, args.noise,
                               target=args.target, varied_speed_share=args.varied_speed,
                               generator=args.generator, exchange_share=args.exchanges,
                               teacher_speeds=tuple(args.teacher_speeds))
    generate(args.out, config)


if __name__ == "__main__":
    main()
