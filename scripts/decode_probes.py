"""Decoding-time probes of joe-ar's intelligibility (docs/distill.md, session 27): can the
student's frames be made crisper after the fact, without training?

    python scripts/decode_probes.py --way WAY [--set dev] [--kind read] [--seed 0]
        [--limit N] [--json F]

Each sentence is normalized, split into clauses as the engine splits them, and spoken
offline (a fresh context per clause, each clause decoded whole: `StudentFamily.synthesize`'s
path, not the engine's chunks), then judged by whisper tiny.en like `polyvox eval`. Ways:

- off: the shipped sampler, unchanged (the baseline of this script's path);
- snapW: every generated prior frame replaced by the nearest of the clause's own teacher
  encodings (one per phoneme id: the frames the student was trained to emit), searched
  from the last chosen id to W ids on (monotone), and fed back as the next input;
- softA: the frame moved a share A of the way to that encoding for decoding only (W = 2;
  the student still reads its own frame back);
- noiseS: the teacher's prior noise added before the flow, as VITS samples:
  frame + N(0, 1) x exp(log-variance of the nearest id) x S;
- teacherS: no student: the teacher's own noise-free durations and prior, with latent
  noise S (0: exactly the target the student learns);
- stepsK-drawsD-tempT: the head's sampler with K Euler steps, D averaged draws and
  temperature T (shipped: 1, 2, 0.2);
- warp: a pointer student speaks at speed 1 and its frames are retimed to `--speed`
  after the fact, each id's run of frames scaled by 1 / speed (at least one frame), as
  the teacher scales its durations; warpA: a run of d frames gets c x d^A frames, c
  chosen so that the clause still lasts 1 / speed of its length (A < 1: long runs,
  vowels and pauses, give up more than short ones, consonants);
- wsola: the student speaks at speed 1 and its audio is time-compressed to `--speed`,
  pitch kept (scripts/fast_speech_ceiling.py's WSOLA); warpA+wsolaX: both, WSOLA taking
  the share X of the log speed (speed^X) and warpA the rest;
- zlin: the student speaks at speed 1 and the teacher flow's output z (its acoustic
  latent, before HiFi-GAN) is resampled linearly in time to `--speed`; warpA+zX: both,
  z taking the share X of the log speed and warpA the rest; zwarpA: z resampled along
  warpA's time map, unrounded (a run of d frames lasts c x d^A frames, fractions kept);
- zsilA: zlin, but the frames of pauses (the clause's start and end, punctuation, and the
  pad after them) are compressed A times as much as the others, the clause still 1 /
  speed as long;
- zsegL: the student speaks at speed 1 and z is cut to `--speed` in segments of L output
  frames, each copied at its own rate from where an even time map puts its start (no
  frame a blend of two; zseg1 is nearest-frame resampling); z{X}+wsola{Y}: z resampled
  linearly by speed^X, then the audio WSOLA-compressed by speed^Y;
- plin: the student speaks at speed 1 and its prior frames (before the teacher's flow) are
  resampled linearly in time to `--speed` (what a per-clause stage before the decoder
  could do, where zlin needs the decoder itself);
- a pointer student (`--weights` of `polyvox train pointer`'s export) under "off": its
  own steps, copies of the teacher's encodings (docs/distill.md, session 28).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from dataclasses import dataclass

import torch

from polyvox.asr.transcribe import Transcriber
from polyvox.eval.score import corpus, item_errors
from polyvox.eval.sets import load_items
from polyvox.models.joe_ar.family import (
    MIN_STEPS_BEFORE_EOS,
    StudentFamily,
    StudentParams,
    load_student_family,
)
from polyvox.models.joe_ar.network import id_features, ungroup_frames
from polyvox.models.layers.attention import ContiguousKV
from polyvox.models.piper.front import Scales, Sentence
from polyvox.models.retime import Retiming, interpolate_frames, retime_latents, run_starts
from polyvox.text.clauses import split_text
from polyvox.text.normalize import make_normalizer

SIGMA_INPUT = "/Exp_1_output_0"  # the joe graph's exp(log-variance) per frame, into stage 2


@dataclass(frozen=True)
class Way:
    kind: str  # off, snap, soft, noise, teacher, sampler
    amount: float = 0.0
    steps: int = 1
    draws: int = 2
    temperature: float | None = None
    wsola_share: float = 0.0  # warp: this share of log speed is WSOLA's (the rest retimed)
    z_share: float = 0.0  # warp: this share of log speed resamples z (the rest retimed)
    z_map: float = 0.0  # warp: z resampled along the runs' time map with this exponent


def parse_way(text: str) -> Way:
    if text in ("off", "wsola"):
        return Way(text)
    if text == "warp":
        return Way(text, 1.0)
    if sampler := re.fullmatch(r"steps(\d+)-draws(\d+)-temp([\d.]+)", text):
        return Way("sampler", steps=int(sampler[1]), draws=int(sampler[2]),
                   temperature=float(sampler[3]))
    if mixed := re.fullmatch(r"warp([\d.]+)\+wsola([\d.]+)", text):
        return Way("warp", float(mixed[1]), wsola_share=float(mixed[2]))
    if named := re.fullmatch(r"zwarp([\d.]+)", text):
        return Way("warp", 1.0, z_share=1.0, z_map=float(named[1]))
    if text == "zlin":
        return Way("warp", 1.0, z_share=1.0)
    if named := re.fullmatch(r"zseg(\d+)", text):
        return Way("zseg", float(named[1]))
    if mixed := re.fullmatch(r"z([\d.]+)\+wsola([\d.]+)", text):
        return Way("warp", 1.0, z_share=float(mixed[1]), wsola_share=float(mixed[2]))
    if text == "plin":
        return Way("plin")
    if named := re.fullmatch(r"zsil([\d.]+)", text):
        return Way("zsil", float(named[1]))
    if named := re.fullmatch(r"zflux([\d.]+)", text):
        return Way("zflux", float(named[1]))
    if mixed := re.fullmatch(r"warp([\d.]+)\+z([\d.]+)", text):
        return Way("warp", float(mixed[1]), z_share=float(mixed[2]))
    if named := re.fullmatch(r"(snap|soft|noise|teacher|warp)([\d.]+)", text):
        return Way(named[1], float(named[2]))
    raise argparse.ArgumentTypeError(f"unknown way {text!r} (see the module docstring)")


class Clause:
    """One clause's teacher encodings per id (the student's targets) and their spreads."""

    def __init__(self, family: StudentFamily, ids: list[int]) -> None:
        front = family.front
        assert front is not None
        generator = torch.Generator().manual_seed(0)
        (stage1,) = front.run_stage1([Sentence(ids, Scales(0.0, 1.0, 0.0), generator)])
        means = front.prior_mean(stage1).T  # [T, C]
        sigmas = torch.from_numpy(stage1.feed[SIGMA_INPUT][0]).float().T
        self.means = id_features(means, stage1.durations)  # [N, C]
        self.sigmas = id_features(sigmas, stage1.durations)
        self.pointer = 0  # the last id a frame was moved towards (monotone search)

    def nearest_ahead(self, frame: torch.Tensor, width: int) -> int:
        stop = min(len(self.means), self.pointer + width + 1)
        distances = (self.means[self.pointer: stop] - frame).square().sum(1)
        self.pointer += int(distances.argmin())
        return self.pointer


def _frames(family: StudentFamily, latent: torch.Tensor) -> torch.Tensor:
    return ungroup_frames(family.flow_lm.denormalize(latent), family.channels)  # [G, C]


def _latent(family: StudentFamily, frames: torch.Tensor) -> torch.Tensor:
    flow_lm = family.flow_lm
    return (frames.reshape(1, -1) - flow_lm.emb_mean) / flow_lm.emb_std


def student_clause(family: StudentFamily, ids: list[int], way: Way,
                   generator: torch.Generator, speed: float = 1.0) -> torch.Tensor:
    """The clause's prior frames [T, C] as the student generates them under `way`."""
    at_speed_one = way.kind in ("warp", "wsola", "plin", "zsil", "zseg", "zflux")  # sped up after
    params = StudentParams(temperature=way.temperature, speed=1.0 if at_speed_one else speed)
    clause = Clause(family, ids)
    kv = ContiguousKV(*family.kv_shape, dtype=torch.float32, device=torch.device("cpu"))
    tokens = torch.tensor(ids)
    features = family.text_features(ids, params.speed)
    family.prefill_tokens(tokens, kv.next_positions(len(ids)), kv, features)
    kv.commit()
    clauses = None  # a pointer student steps with its clause's features
    if family.traits.steps_read_clause:
        assert features is not None
        clauses = (features[None], torch.tensor([len(ids)]))
    latent = torch.full((1, family.latent_dim), float("nan"))
    emitted = []
    for index in range(family.max_frames(len(ids), params.speed)):
        noise = family.sample_noise(generator, params)[None]
        latent, logit = family.step_batch(latent, kv.next_positions(1)[:, 0], kv, noise,
                                          way.steps, clauses)
        kv.commit()
        if index >= MIN_STEPS_BEFORE_EOS and float(logit) > family.eos_threshold(params):
            break
        frames = _frames(family, latent)
        if way.kind == "snap":
            frames = torch.stack([clause.means[clause.nearest_ahead(f, int(way.amount))]
                                  for f in frames])
            latent = _latent(family, frames)  # read back as generated
        elif way.kind == "soft":
            frames = torch.stack([f + way.amount * (clause.means[clause.nearest_ahead(f, 2)] - f)
                                  for f in frames])
        emitted.append(frames)
    if not emitted:
        return torch.zeros(0, family.channels)
    frames = torch.cat(emitted)
    if way.kind == "noise":
        nearest = torch.cdist(frames, clause.means).argmin(1)
        frames = frames + torch.randn(frames.shape, generator=generator) \
            * clause.sigmas[nearest] * way.amount
    if way.kind == "warp":
        frames = retime(frames, speed ** (1 - way.wsola_share - way.z_share), way.amount)
    return frames


def retime(frames: torch.Tensor, speed: float, exponent: float = 1.0) -> torch.Tensor:
    """Runs of equal frames (one per id) rescaled: a run of d frames to c x d^exponent,
    c such that this clause lasts 1 / speed of its frames (the engine's retiming uses one
    c for every clause: polyvox.models.retime); each run kept >= 1 frame."""
    starts = run_starts(frames)
    powered = sum((stop - start) ** exponent for start, stop in itertools.pairwise(starts))
    scale = len(frames) / speed / powered
    return retime_latents(frames, Retiming(scale, exponent, 1, frames.shape[1]))


def resample_along_runs(z: torch.Tensor, frames: torch.Tensor, speed: float,
                        exponent: float) -> torch.Tensor:
    """z [C, T] resampled to T / speed frames along a piecewise-linear time map: each run
    of d equal frames lasts c x d^exponent output frames (c: the clause 1 / speed as long),
    fractions kept; each output frame reads z linearly interpolated at its source time."""
    starts = run_starts(frames)
    lengths = torch.tensor([b - a for a, b in itertools.pairwise(starts)], dtype=torch.float64)
    targets = lengths ** exponent
    targets *= len(frames) / speed / float(targets.sum())
    out_edges = torch.cat([torch.zeros(1, dtype=torch.float64), targets.cumsum(0)])
    src_edges = torch.tensor(starts, dtype=torch.float64)
    size = max(1, round(float(out_edges[-1])))
    t = torch.arange(size, dtype=torch.float64) + 0.5  # output frame centres
    run = (torch.searchsorted(out_edges, t, right=True) - 1).clamp(0, len(lengths) - 1)
    source = src_edges[run] + (t - out_edges[run]) / targets[run] * lengths[run] - 0.5
    return interpolate_frames(z, source.clamp(0, z.shape[-1] - 1)).T


PAUSE_IDS = {1, 2, 4, 8, 10, 11, 12, 13}  # ^ $ ! , . : ; ? in Piper's phoneme map


def resample_pauses(z: torch.Tensor, frames: torch.Tensor, means: torch.Tensor,
                    ids: list[int], speed: float, factor: float) -> torch.Tensor:
    """z [C, T] resampled to T / speed frames, the frames of pauses (each frame's id: the
    nearest of the clause's id encodings) lasting 1 / factor of the others' output time."""
    nearest = torch.cdist(frames, means).argmin(1).tolist()
    pause = [ids[i] in PAUSE_IDS or (i and ids[i] == 0 and ids[i - 1] in PAUSE_IDS)
             for i in nearest]
    weights = torch.tensor([1 / factor if p else 1.0 for p in pause], dtype=torch.float64)
    size = max(1, round(len(frames) / speed))
    return resample_by_lengths(z, weights * size / float(weights.sum()), size)


def resample_by_lengths(z: torch.Tensor, lengths: torch.Tensor, size: int) -> torch.Tensor:
    """z [C, T] resampled to `size` frames, source frame i lasting lengths[i] output frames
    (they sum to `size`); each output frame reads z linearly interpolated at its source
    time."""
    edges = torch.cat([torch.zeros(1, dtype=torch.float64), lengths.cumsum(0)])
    t = torch.arange(size, dtype=torch.float64) + 0.5
    frame = (torch.searchsorted(edges, t, right=True) - 1).clamp(0, len(lengths) - 1)
    source = (frame + (t - edges[frame]) / lengths[frame] - 0.5).clamp(0, z.shape[-1] - 1)
    return interpolate_frames(z, source).T


def resample_by_change(z: torch.Tensor, speed: float, power: float) -> torch.Tensor:
    """z [C, T] resampled to T / speed frames, each source frame given output time in
    proportion to (how fast z changes there)^power, at most one output frame (never
    slower than speed 1): transitions keep their time, steady stretches give it up."""
    size = max(1, round(z.shape[-1] / speed))
    padded = torch.cat([z[:, :1], z, z[:, -1:]], 1).double()
    change = (padded[:, 2:] - padded[:, :-2]).norm(dim=0) / 2
    share = (change / change.mean().clamp_min(1e-9)).clamp_min(1e-3) ** power
    low, high = 0.0, 1e6  # scale such that sum(min(scale x share, 1)) = size
    for _ in range(100):
        scale = (low + high) / 2
        low, high = (scale, high) if float(torch.clamp(scale * share, max=1.0).sum()) < size \
            else (low, scale)
    lengths = torch.clamp(scale * share, max=1.0)
    return resample_by_lengths(z, lengths * size / float(lengths.sum()), size)


def resample_segments(z: torch.Tensor, speed: float, length: int) -> torch.Tensor:
    """z [C, T] cut to round(T / speed) frames: output frames in segments of `length`, the
    segment starting at output frame j copied at speed 1 from source frame round(j x
    speed), so every output frame is one of z's, none a blend."""
    size = max(1, round(z.shape[-1] / speed))
    out = torch.arange(size)
    start = out // length * length
    source = torch.round(start * speed).long() + out - start
    return z[:, source.clamp(0, z.shape[-1] - 1)]


def speak(family: StudentFamily, text: str, way: Way, seed: int,
          speed: float = 1.0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    pieces = []
    for clause_text in split_text(text, family.count_tokens, 350):
        ids = family.phoneme_ids(clause_text)
        if way.kind == "teacher":
            assert family.front is not None
            (stage1,) = family.front.run_stage1([Sentence(ids, Scales(way.amount, 1 / speed, 0.0),
                                                          generator)])
            z = family.front.run_flow(stage1)
        else:
            frames = student_clause(family, ids, way, generator, speed)
            if not len(frames):
                continue
            if way.kind == "plin" and speed != 1.0:  # [T, C] resampled in time
                size = max(1, round(len(frames) / speed))
                frames = torch.nn.functional.interpolate(frames.T[None], size=size,
                                                         mode="linear")[0].T
            assert family.flow is not None
            z = family.flow.flow_from_prior(frames.T)
            if way.kind == "zsil" and speed != 1.0:
                z = resample_pauses(z, frames, Clause(family, ids).means, ids, speed,
                                    way.amount)
            elif way.kind == "zflux" and speed != 1.0:
                z = resample_by_change(z, speed, way.amount)
            elif way.kind == "zseg" and speed != 1.0:
                z = resample_segments(z, speed, int(way.amount))
            elif way.z_map and speed != 1.0:
                z = resample_along_runs(z, frames, speed, way.z_map)
            elif way.z_share and speed != 1.0:  # [C, T] resampled in time
                size = max(1, round(z.shape[-1] / speed ** way.z_share))
                z = torch.nn.functional.interpolate(z[None], size=size, mode="linear")[0]
        pieces.append(family.hifigan(z[None])[0].reshape(-1))
    audio = torch.cat(pieces) if pieces else torch.zeros(0)
    share = 1.0 if way.kind == "wsola" else way.wsola_share
    if share and speed != 1.0:
        from fast_speech_ceiling import wsola  # scripts/ is on the path of a script run
        audio = wsola(audio, speed ** share)
    return audio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--way", type=parse_way, required=True)
    parser.add_argument("--set", default="dev", choices=["dev", "test"])
    parser.add_argument("--kind", default="read", choices=["read", "service", "all"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--json", help="write each sentence's transcript and edits here")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--weights", help="the student export (default: the shipped one)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    family = load_student_family(weights=args.weights)
    family.flow_lm.head_draws = args.way.draws
    normalizer = make_normalizer()
    transcriber = Transcriber(threads=1)
    rows, errors = [], []
    with torch.no_grad():
        for item in load_items(args.set, args.kind)[: args.limit]:
            audio = speak(family, normalizer.normalize(item.text), args.way, args.seed,
                          args.speed)
            heard = transcriber.transcribe(audio, family.sample_rate)
            errors.append(item_errors(item, heard))
            rows.append({"kind": item.kind, "number": item.number, "heard": heard,
                         "edits": errors[-1].num_edits,
                         "seconds": audio.numel() / family.sample_rate})
            print(f"{item.kind} {item.number}: {errors[-1].num_edits} edits | {heard}",
                  flush=True)
    total = corpus(errors)
    print(f"{args.set} {args.kind} seed {args.seed}: {total.num_edits} edits / "
          f"{total.num_reference_words} words = {total.wer:.4f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump({"argv": vars(args) | {"way": str(args.way)}, "sentences": rows}, file,
                      indent=1)


if __name__ == "__main__":
    main()
