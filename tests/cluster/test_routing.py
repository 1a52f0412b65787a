"""The cluster's routing policy (polyvox/cluster/routing.py) on synthetic replica states:
each case is what a router would be told, and where the next stream must go."""

from __future__ import annotations

import pytest

from polyvox.cluster.routing import ReplicaLoad, rank_replicas


def R(name: str, limit: int = 4, running: int = 0, queued: int = 0, behind: int = 0,
      voices: tuple[str, ...] = (), ready: bool = True, draining: bool = False) -> ReplicaLoad:
    return ReplicaLoad(name, is_ready=ready, is_draining=draining, limit=limit,
                       running=running, queued=queued, behind=behind,
                       voices=frozenset(voices))


def names(ranks: list[list[ReplicaLoad]]) -> list[list[str]]:
    return [[replica.replica_id for replica in rank] for rank in ranks]


@pytest.mark.parametrize(("replicas", "voice", "expected"), [
    # the most free streams first, whatever the open-request counts say
    ([R("a", limit=4, running=3), R("b", limit=8, running=4)], None, [["b", "a"]]),
    # a replica with listeners behind takes a stream only when nothing else is up
    ([R("a", running=1, behind=1), R("b", limit=4, running=4)], None, [["b"], ["a"]]),
    # full replicas: the shortest expected wait (queued per stream of limit) first
    ([R("a", limit=2, running=2, queued=2), R("b", limit=8, running=8, queued=4)], None,
     [["b", "a"]]),
    # not ready or draining: never
    ([R("a", ready=False), R("b", draining=True), R("c", running=3)], None, [["c"]]),
    ([R("a", ready=False)], None, []),
    # the voice's holder first when the others have at most one free stream more
    ([R("a", running=1), R("b", running=2, voices=("v",))], "v", [["b", "a"]]),
    # ... but not when another has clearly more room
    ([R("a", running=0), R("b", running=2, voices=("v",))], "v", [["a", "b"]]),
    # a holder that is full waits like any other
    ([R("a", running=3), R("b", running=4, voices=("v",))], "v", [["a"], ["b"]]),
])
def test_the_next_stream_goes_where_it_can_start_soonest(
        replicas: list[ReplicaLoad], voice: str | None, expected: list[list[str]]) -> None:
    assert names(rank_replicas(replicas, voice)) == expected


def test_a_replica_is_ranked_once() -> None:
    replicas = [R(f"r{i}", limit=4, running=i % 6, queued=i % 3, behind=i % 4 == 3)
                for i in range(12)]
    ranked = [r.replica_id for rank in rank_replicas(replicas, "v") for r in rank]
    assert sorted(ranked) == sorted(r.replica_id for r in replicas)


def test_a_replicas_report_says_what_its_admission_would_let_in() -> None:
    """The headroom a router sees is the headroom the replica's own admission has."""
    import asyncio

    from polyvox.cluster.routing import replica_load
    from polyvox.server.admission import Admission

    async def run() -> None:
        admission = Admission(max_running=3, max_queued=4, max_wait_seconds=60)
        admission.is_ready = True
        behind = 0
        admission.pressure = lambda: behind > 0
        tickets = [await admission.acquire() for _ in range(2)]
        for running, expected in ((2, 1), (3, 0)):
            load = replica_load("a", admission, behind, voices=["default"])
            assert (load.running, load.headroom) == (running, admission.headroom) == (
                running, expected)
            if running == 2:
                tickets.append(await admission.acquire())
        waiter = asyncio.ensure_future(admission.acquire())
        await asyncio.sleep(0)
        load = replica_load("a", admission, behind)
        assert (load.queued, load.headroom, load.expected_wait) == (1, 0, 2 / 3)
        admission.release(tickets.pop())
        await waiter
        behind = 1  # a listener fell behind: nobody new, here or through the router
        admission.release(tickets.pop())
        load = replica_load("a", admission, behind)
        assert load.headroom == admission.headroom == 0 and load.running == 2
        assert names(rank_replicas([load, R("b", limit=3, running=3)])) == [["b"], ["a"]]

    asyncio.run(run())
