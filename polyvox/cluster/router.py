"""polyvox's Ray Serve request router: which engine replica a call goes to.

Serve runs one router per deployment handle, in the process that holds the handle (here
the ingress). A call names where it must go in its `route` keyword (a `Route`):

- `replica`: that replica, when it is still up. The ingress picks it (cluster admission
  and `rank_replicas` on its exact counts of streams per replica), and calls that must
  reach one replica (a stream's text pieces, a voice broadcast) name it.
- otherwise the replicas ranked by `rank_replicas` (routing.py) on the loads the replicas
  report through `record_routing_stats`, leaving out `exclude` (replicas that just died
  under this stream).

Serve sends a call to the least loaded replica *within* a rank; each replica is given a
rank of its own here, so the order `rank_replicas` chose is kept.

The router registers itself under its deployment's name in `ROUTERS` (module state of
polyvox.cluster.router, imported at call time: Serve unpickles the router class by value,
so a global of the class's own module would be a copy), where the ingress reads the
replicas Serve knows and their reported loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica

from polyvox.cluster.routing import ReplicaLoad, rank_replicas

ROUTERS: dict[str, PolyvoxRouter] = {}  # deployment name -> its router in this process


@dataclass(frozen=True)
class Route:
    """Where a call must go (see the module doc)."""

    replica: str | None = None
    exclude: frozenset[str] = frozenset()
    voice: str | None = None


def load_of(replica: RunningReplica) -> ReplicaLoad:
    """What a replica last reported (ready with room for one stream before it has)."""
    stats = replica.routing_stats or {}
    return load_from_stats(replica.replica_id.unique_id, stats)


def load_from_stats(replica_id: str, stats: dict[str, Any]) -> ReplicaLoad:
    return ReplicaLoad(replica_id, is_ready=bool(stats.get("is_ready", True)),
                       is_draining=bool(stats.get("is_draining", False)),
                       limit=int(stats.get("limit", 1)), running=int(stats.get("running", 0)),
                       queued=0, behind=int(stats.get("behind", 0)),
                       voices=frozenset(stats.get("voices", ())))


class PolyvoxRouter(FIFOMixin, RequestRouter):
    def initialize_state(self, **kwargs: Any) -> None:
        import polyvox.cluster.router as module  # the real module, not the pickled copy

        module.ROUTERS[self._deployment_id.name] = self

    def replicas(self) -> list[RunningReplica]:
        return list(self.curr_replicas.values())

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None
                              ) -> list[list[RunningReplica]]:
        route = pending_request.kwargs.get("route") if pending_request is not None else None
        by_id = {r.replica_id.unique_id: r for r in candidate_replicas}
        order = route_order([load_of(r) for r in candidate_replicas],
                            route if isinstance(route, Route) else Route())
        return [[by_id[replica_id]] for replica_id in order]


def route_order(loads: list[ReplicaLoad], route: Route) -> list[str]:
    """The replicas a call may go to, in order of preference (see the module doc)."""
    if route.replica is not None and any(load.replica_id == route.replica for load in loads):
        return [route.replica]
    allowed = [load for load in loads if load.replica_id not in route.exclude]
    return [load.replica_id for rank in rank_replicas(allowed, route.voice) for load in rank]
