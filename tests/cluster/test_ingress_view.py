"""The ingress's decisions on synthetic replica states, without Ray: where a call goes
(router.route_order), how many streams the cluster admits now (ClusterServed.capacity),
which replica a new stream takes (ClusterServed.choose)."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.serve")

from polyvox.cluster.ingress import ClusterServed, ReplicaView  # noqa: E402
from polyvox.cluster.router import Route, load_from_stats, route_order  # noqa: E402
from polyvox.cluster.routing import ReplicaLoad  # noqa: E402


def load(name: str, limit: int = 2, running: int = 0, behind: int = 0,
         draining: bool = False, voices: tuple[str, ...] = ()) -> ReplicaLoad:
    return ReplicaLoad(name, limit=limit, running=running, behind=behind,
                       is_draining=draining, voices=frozenset(voices))


@pytest.mark.parametrize(("loads", "route", "expected"), [
    # a named replica that is up gets the call, however loaded
    ([load("a"), load("b", running=2, behind=1)], Route(replica="b"), ["b"]),
    # a named replica that is gone: the others, best first
    ([load("a", running=1), load("b")], Route(replica="dead"), ["b", "a"]),
    # a replica that just died under a stream is left out
    ([load("a"), load("b", running=1)], Route(exclude=frozenset({"a"})), ["b"]),
    # free room first, then a full one, the one behind last; draining never
    ([load("a", running=2), load("b", behind=1, running=1), load("c", running=1),
      load("d", draining=True)], Route(), ["c", "a", "b"]),
    # the voice's holder first unless another has clearly more room
    ([load("a", limit=4), load("b", limit=4, running=1, voices=("v",))], Route(voice="v"),
     ["b", "a"]),
    ([load("a", limit=8), load("b", limit=8, running=5, voices=("v",))], Route(voice="v"),
     ["a", "b"]),
])
def test_route_order(loads: list[ReplicaLoad], route: Route, expected: list[str]) -> None:
    assert route_order(loads, route) == expected


def test_a_replica_that_has_not_reported_is_ready_with_room_for_one() -> None:
    fresh = load_from_stats("a", {})
    assert fresh.is_ready and not fresh.is_draining and fresh.headroom == 1


def ingress(*views: ReplicaView) -> ClusterServed:
    served = ClusterServed(handle=None, deployment="test", info={
        "model": "m", "sample_rate": 24000, "samples_per_frame": 1920,
        "supports_voice_cloning": True})
    served.replicas = {view.replica_id: view for view in views}
    return served


def view(name: str, state: str = "ready", streams: int = 0, **reported: object) -> ReplicaView:
    return ReplicaView(name, state=state, streams=streams,
                       reported=load_from_stats(name, dict(reported)))


@pytest.mark.parametrize(("views", "capacity", "chosen"), [
    # idle: every replica's limit; the most room first
    ([view("a", limit=2), view("b", limit=3)], 5, "b"),
    # the ingress's own count of streams is what is running (the report lags)
    ([view("a", limit=2, streams=2, running=0), view("b", limit=2, streams=1)], 4, "b"),
    # listeners behind on a replica: it keeps its streams, takes no more
    ([view("a", limit=4, streams=2, behind=1), view("b", limit=2, streams=2)], 4, "b"),
    # starting (voices not pushed yet) and draining replicas take nothing
    ([view("a", state="starting", limit=4), view("b", state="draining", limit=4),
      view("c", limit=1)], 1, "c"),
    ([view("a", limit=4, is_draining=True), view("b", state="starting")], 0, None),
])
def test_capacity_and_choice(views: list[ReplicaView], capacity: int, chosen: str | None
                             ) -> None:
    served = ingress(*views)
    assert served.capacity() == capacity
    picked = served.choose(None)
    assert (picked.replica_id if picked else None) == chosen
    assert served.has_ready == any(v.state == "ready" for v in views)


def test_choose_leaves_out_replicas_that_died_under_the_stream() -> None:
    served = ingress(view("a", limit=4), view("b", limit=1))
    assert served.choose(None, exclude={"a"}).replica_id == "b"
    assert served.choose(None, exclude={"a", "b"}) is None
