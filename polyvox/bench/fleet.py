"""A simulated fleet: polyvox's routing and cluster admission against power-of-two routing
on queue length, at a scale this box cannot run (issue #23).

    python -m polyvox.bench.fleet --replicas 100 --capacity 2 --loads 0.8,1,1.5,3

Each replica is a processor-sharing model of one engine: it makes `throughput` audio
seconds per second, shared by the streams it runs, no stream faster than `speed` (a
lone stream's real-time factor); so `capacity` streams (throughput / `REAL_TIME_MARGIN`)
run faster than real time and one more does not. A stream's audio starts after
`prefill` seconds; its first audio is its first `CHUNK_SECONDS`; from then on its
listener plays in real time and a stream whose listener catches up with what was made
before the end has an underrun. Durations are drawn from a log-normal around
`mean_seconds`; arrivals are Poisson or bursty (gamma gaps of shape 1/4, the same mean),
at `load` x the fleet's capacity in streams.

Policies:
- `polyvox`: the ingress's: one FIFO admission over the fleet (a turn while the ready
  replicas' limits allow), a queue only while the estimated wait is under `max_wait`
  (else an immediate 429), the replica chosen by `rank_replicas` (routing.py, the
  production code).
- `p2c`: Ray Serve's default: two random replicas, the one with fewer ongoing requests,
  no cap (every request is taken: a replica past its capacity makes all its listeners
  late).
- `p2c-capped`: the same with `max_ongoing_requests` = capacity (the peer at its best):
  when both picks are full the request retries with Serve's backoff (25 ms, doubling, at
  most 0.5 s) and counts as queued; past `max_queued` queued it gets 503.

Goodput: streams that finished with TTFA <= `ttfa_slo` and no underrun, per second (as
polyvox bench counts it). Deterministic per seed. A model, not a measurement: it says
how the policies differ, not what a real fleet makes.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from polyvox.bench.metrics import percentile
from polyvox.cluster.routing import ReplicaLoad, rank_replicas

CHUNK_SECONDS = 0.08  # audio in a stream's first chunk
REAL_TIME_MARGIN = 1.25  # capacity: streams a replica runs at this many x real time
TICK = 0.01  # simulated seconds per step
PRIOR_SERVICE_SECONDS = 3.0  # admission's mean turn before any has ended (admission.py)
SERVICE_AVERAGING = 0.2
BACKOFF = (0.025, 2.0, 0.5)  # Serve's router: initial, multiplier, most


@dataclass
class FleetConfig:
    replicas: int = 100
    capacity: int = 2  # real-time streams per replica
    speed: float = 10.0  # a lone stream's audio seconds per second
    prefill: float = 0.05
    mean_seconds: float = 4.0  # audio per request
    max_wait: float = 0.25
    max_queued: int = 64
    ttfa_slo: float = 1.0
    seconds: float = 60.0
    seed: int = 0

    @property
    def throughput(self) -> float:
        return self.capacity * REAL_TIME_MARGIN

    @property
    def capacity_rate(self) -> float:
        """Arrivals per second the fleet serves in real time at full use."""
        per_stream = min(self.speed, REAL_TIME_MARGIN)
        return self.replicas * self.capacity * per_stream / self.mean_seconds


@dataclass
class _Stream:
    arrived: float
    seconds: float
    replica: int = -1
    admitted: float | None = None
    made: float = 0.0
    played: float = 0.0
    first_audio: float | None = None
    finished_making: float | None = None
    underrun: bool = False
    retry_at: float = 0.0
    attempts: int = 0


@dataclass
class FleetResult:
    policy: str
    arrivals: str
    load: float
    offered: int = 0
    rejected: int = 0
    good: int = 0
    underruns: int = 0
    ttfas: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def row(self) -> dict[str, float | str]:
        accepted = self.offered - self.rejected
        return {"policy": self.policy, "arrivals": self.arrivals, "load": self.load,
                "offered": self.offered,
                "rejected_share": round(self.rejected / self.offered, 3) if self.offered else 0,
                "viable_share": round(1 - self.underruns / accepted, 3) if accepted else 1,
                "goodput": round(self.good / self.seconds, 2),
                "ttfa_p90_ms": round(1000 * (percentile(self.ttfas, 90) or 0.0))}


def simulate(config: FleetConfig, policy: str, arrivals: str, load: float) -> FleetResult:
    rng = random.Random(f"{config.seed}-{arrivals}-{load}")
    routing = random.Random(f"{config.seed}-routing")
    rate = load * config.capacity_rate
    result = FleetResult(policy, arrivals, load, seconds=config.seconds)
    running: list[list[_Stream]] = [[] for _ in range(config.replicas)]
    waiting: deque[_Stream] = deque()
    live: list[_Stream] = []
    mean_service: float | None = None
    next_arrival = _gap(rng, rate, arrivals)
    now = 0.0
    sigma = 0.5
    while now < config.seconds or live or waiting:
        # arrivals (none after the window closes)
        while now < config.seconds and next_arrival <= now:
            seconds = config.mean_seconds * math.exp(rng.gauss(-sigma * sigma / 2, sigma))
            stream = _Stream(next_arrival, seconds)
            result.offered += 1
            if policy == "polyvox":
                if not _polyvox_admit(config, stream, running, waiting, mean_service):
                    result.rejected += 1
            elif policy == "p2c":
                _start(stream, _two_choices(routing, running), running, live, now)
            elif len(waiting) >= config.max_queued:
                result.rejected += 1
            else:
                waiting.append(stream)
            next_arrival += _gap(rng, rate, arrivals)
        # queued requests get turns
        if policy == "polyvox":
            while waiting and _free_turn(config, running):
                replica = _polyvox_choice(config, running)
                _start(waiting.popleft(), replica, running, live, now)
        elif policy == "p2c-capped":
            for stream in [s for s in waiting if s.retry_at <= now]:
                replica = _two_choices(routing, running)
                if len(running[replica]) < config.capacity:
                    waiting.remove(stream)
                    _start(stream, replica, running, live, now)
                else:
                    initial, multiplier, most = BACKOFF
                    stream.retry_at = now + min(most, initial * multiplier ** stream.attempts)
                    stream.attempts += 1
        # the replicas make audio; the listeners play it
        for streams in running:
            making = [s for s in streams if s.admitted is not None
                      and now - s.admitted >= config.prefill]
            if making:
                share = min(config.speed, config.throughput / len(making)) * TICK
                for stream in making:
                    stream.made = min(stream.seconds, stream.made + share)
        for stream in list(live):
            if stream.first_audio is None and stream.made >= min(CHUNK_SECONDS, stream.seconds):
                stream.first_audio = now
            elif stream.first_audio is not None:
                stream.played = min(stream.seconds, stream.played + TICK)
                if stream.played > stream.made + 1e-9:
                    stream.underrun = True
            if stream.finished_making is None and stream.made >= stream.seconds:
                stream.finished_making = now
                running[stream.replica].remove(stream)
                held = now - (stream.admitted or now)
                mean_service = held if mean_service is None else (
                    (1 - SERVICE_AVERAGING) * mean_service + SERVICE_AVERAGING * held)
            if stream.played >= stream.seconds:
                live.remove(stream)
                result.underruns += stream.underrun
                ttfa = (stream.first_audio or now) - stream.arrived
                result.ttfas.append(ttfa)
                result.good += not stream.underrun and ttfa <= config.ttfa_slo
        now += TICK
    return result


def _gap(rng: random.Random, rate: float, arrivals: str) -> float:
    if arrivals == "poisson":
        return rng.expovariate(rate)
    return rng.gammavariate(0.25, 1 / (0.25 * rate))  # bursty: shape 1/4, same mean


def _start(stream: _Stream, replica: int, running: list[list[_Stream]], live: list[_Stream],
           now: float) -> None:
    stream.replica, stream.admitted = replica, now
    running[replica].append(stream)
    live.append(stream)


def _two_choices(rng: random.Random, running: list[list[_Stream]]) -> int:
    a, b = rng.sample(range(len(running)), 2)
    return a if len(running[a]) <= len(running[b]) else b


def _free_turn(config: FleetConfig, running: list[list[_Stream]]) -> bool:
    return any(len(streams) < config.capacity for streams in running)


def _polyvox_choice(config: FleetConfig, running: list[list[_Stream]]) -> int:
    loads = [ReplicaLoad(str(i), limit=config.capacity, running=len(streams))
             for i, streams in enumerate(running)]
    return int(rank_replicas(loads)[0][0].replica_id)


def _polyvox_admit(config: FleetConfig, stream: _Stream, running: list[list[_Stream]],
                   waiting: deque[_Stream], mean_service: float | None) -> bool:
    """The ingress's admission (server/admission.py): a turn now, a place in the queue
    while the estimated wait is short enough, else refused."""
    if waiting or not _free_turn(config, running):
        if len(waiting) >= config.max_queued:
            return False
        service = PRIOR_SERVICE_SECONDS if mean_service is None else mean_service
        wait = (len(waiting) + 1) / (config.replicas * config.capacity) * service
        if wait > config.max_wait:
            return False
    waiting.append(stream)  # a free turn takes it within this tick
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m polyvox.bench.fleet",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=100)
    parser.add_argument("--capacity", type=int, default=2, help="real-time streams each")
    parser.add_argument("--speed", type=float, default=10.0)
    parser.add_argument("--mean-seconds", type=float, default=4.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--loads", default="0.8,1,1.5,3")
    parser.add_argument("--arrivals", default="poisson,bursty")
    parser.add_argument("--policies", default="polyvox,p2c,p2c-capped")
    parser.add_argument("--seeds", type=int, default=3, help="runs per cell (medians)")
    args = parser.parse_args(argv)
    header = "policy      arrivals  load  rejected  viable  goodput/s  TTFA p90 ms"
    print(header)
    for arrivals in args.arrivals.split(","):
        for load in (float(x) for x in args.loads.split(",")):
            for policy in args.policies.split(","):
                rows = [simulate(FleetConfig(
                    replicas=args.replicas, capacity=args.capacity, speed=args.speed,
                    mean_seconds=args.mean_seconds, seconds=args.seconds, seed=seed),
                    policy, arrivals, load).row() for seed in range(args.seeds)]
                median = {key: statistics.median(float(r[key]) for r in rows)
                          for key in ("rejected_share", "viable_share", "goodput",
                                      "ttfa_p90_ms")}
                print(f"{policy:<11} {arrivals:<9} {load:<5g} "
                      f"{median['rejected_share']:>8.1%} {median['viable_share']:>7.1%} "
                      f"{median['goodput']:>10.2f} {median['ttfa_p90_ms']:>12.0f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
