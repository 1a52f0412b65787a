"""The cost model: what each unit of engine work costs on this machine, learned from the
engine's own timings.

Every stage is priced the same way: a fixed part per call plus a part per unit of work
(`LinearCost`): a packed prefill call per token (autoregressive families) or per clause
(non-autoregressive), an AR step per row, a decoder call per frame it reads (window
included), the later pieces of a clause per frame. The planner reads these figures; only
the engine writes them (`StageCosts.observe`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


class LinearCost:
    """seconds = per_call x calls + per_unit x units, fitted to observations by exponentially
    weighted least squares (the newest observation weighs `WEIGHT`), starting from a prior
    that counts as `PRIOR` observations' worth of evidence. A stage's first observation is
    skipped: its first run is cold (kernels chosen, weights packed, buffers allocated) and
    can cost several times its usual."""

    WEIGHT = 0.2
    PRIOR = 1.0

    def __init__(self, per_call: float, per_unit: float, typical_units: float,
                 weight: float = WEIGHT, prior: float = PRIOR) -> None:
        # Sums of w*x*x' (x = (calls, units)) and w*x*y, as if `prior` typical calls had
        # been seen costing what the prior says.
        a, b, n = per_call, per_unit, typical_units
        p = prior
        self.weight = weight
        self._xx = [p * 1.0, p * n, p * n * n]  # sum w*c*c, w*c*u, w*u*u
        self._xy = [p * (a + b * n), p * (a + b * n) * n]  # sum w*c*y, w*u*y
        self._prior = (a, b)
        self.per_call, self.per_unit = a, b
        self._seen = False

    def observe(self, seconds: float, calls: int, units: float) -> None:
        if calls <= 0:
            return
        if not self._seen:
            self._seen = True
            return
        keep = 1.0 - self.weight
        c, u, y = float(calls), float(units), seconds
        self._xx = [keep * self._xx[0] + c * c, keep * self._xx[1] + c * u,
                    keep * self._xx[2] + u * u]
        self._xy = [keep * self._xy[0] + c * y, keep * self._xy[1] + u * y]
        self._solve()

    def _solve(self) -> None:
        cc, cu, uu = self._xx
        cy, uy = self._xy
        det = cc * uu - cu * cu
        if det <= 1e-12 * max(cc * uu, 1e-30):
            # NOTE: every call so far had the same size: the split into a fixed and a per
            # unit part is not known; keep the prior's split of the measured total.
            a, b = self._prior
            total = cy / cc if cc else a + b
            scale = total / (a + b * cu / cc) if a + b * cu / cc > 0 else 1.0
            self.per_call, self.per_unit = a * scale, b * scale
            return
        a = (cy * uu - uy * cu) / det
        b = (uy * cc - cy * cu) / det
        if a < 0:  # a negative fixed part is noise: all of it per unit
            a, b = 0.0, uy / uu if uu else b
        if b < 0:
            a, b = cy / cc, 0.0
        self.per_call, self.per_unit = a, b

    def __call__(self, units: float, calls: int = 1) -> float:
        return self.per_call * calls + self.per_unit * units


class StageCosts:
    """The engine's stages, each a LinearCost, plus the whole engine step as measured (what
    waiting for "one more step" costs)."""

    WEIGHT = 0.2  # the engine step's average: weight of the newest measurement

    def __init__(self) -> None:
        # Priors: pocket/english on 2 cores (a packed prefill ~8 ms + 0.5 ms per token; an
        # AR step ~15 ms + 1.5 ms per row; a decoder call ~10 ms + 0.5 ms per frame).
        self.prefill = LinearCost(0.008, 0.0005, 32)  # per call, per token (AR families)
        self.clause = LinearCost(0.0, 0.05, 1)  # per call, per clause (non-AR families)
        self.step = LinearCost(0.015, 0.0015, 4)  # per AR step, per row
        self.decode = LinearCost(0.01, 0.0005, 16)  # per decoder call, per frame read
        self.piece = LinearCost(0.0, 0.0002, 100)  # per call, per frame of a clause's rest
        self.engine_step = 0.05  # s per engine step with AR work (all its stages)
        self._engine_step_seen = False

    def observe_engine_step(self, seconds: float) -> None:
        if not self._engine_step_seen:
            self._engine_step_seen = True
            return
        self.engine_step = (1 - self.WEIGHT) * self.engine_step + self.WEIGHT * seconds


class Timing(NamedTuple):
    """One timed call of a stage (the trace the replay simulator reads)."""

    stage: str  # prefill, clause, step, decode, piece
    seconds: float
    calls: int
    units: float


@dataclass
class Recording:
    """What an engine keeps when asked to (`Engine.recording`): every stage timing, and
    each request's clauses as (tokens, frames generated), for the replay simulator
    (polyvox/bench/replay.py)."""

    timings: list[Timing] = field(default_factory=list)
    clauses: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
