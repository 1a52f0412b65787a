"""The benchmark's baselines, as planners behind the batched planner's interface: what
`polyvox bench --modes sequential,interleaved` compares the batched engine against."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from polyvox.engine.costs import StageCosts
from polyvox.engine.planner import BatchedPlanner
from polyvox.engine.plans import Chunk, Planner, Rules, StreamView, View, WorkPlan


class SequentialPlanner(BatchedPlanner):
    """One request at a time, start to end."""

    max_admitted = 1


class InterleavedPlanner(BatchedPlanner):
    """Every admitted request progresses, but one request's work per engine step, in turn
    (no batching across requests)."""

    def plan_work(self, view: View, now: float, costs: StageCosts,
                  candidates: tuple[StreamView, ...] | None = None) -> WorkPlan:
        if view.streams:
            candidates = (view.streams[view.turn % len(view.streams)],)
        return super().plan_work(view, now, costs, candidates)

    def plan_decodes(self, view: View, now: float, costs: StageCosts, work: WorkPlan,
                     candidates: Iterable[StreamView] | None = None) -> list[Chunk]:
        # NOTE: a request prefilled this step also steps in it: it counts once.
        turn = {id(key) for key in (*work.prefills, *work.steps, *work.rests)}
        chosen = [s for s in view.streams if id(s.key) in turn] or list(view.streams[-1:])
        return super().plan_decodes(view, now, costs, work, chosen)


PLANNERS = {"batched": BatchedPlanner, "sequential": SequentialPlanner,
            "interleaved": InterleavedPlanner}


def make_planner(config: Any, family: Any) -> Planner:
    """The planner of `config.schedule` (a config already resolved for the family)."""
    return make_planner_of(config.schedule, Rules.of(config, family))


def make_planner_of(schedule: str, rules: Rules) -> Planner:
    """The planner of a schedule, with `rules` (the decode tick only where batched)."""
    if schedule not in PLANNERS:
        raise ValueError(f"unknown schedule {schedule!r}; one of {sorted(PLANNERS)}")
    return PLANNERS[schedule](dataclasses.replace(rules, tick=schedule == "batched"))
