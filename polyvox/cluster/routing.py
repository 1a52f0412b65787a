"""Which replica takes a new stream: the routing policy of a cluster of polyvox engines
(issue #23), a pure function of the replicas' reported loads, so it can be tested on
synthetic states and called from whichever router runs it (a Ray Serve `RequestRouter`'s
`choose_replicas` returns the same ranked lists).

What matters for audio is not the count of open requests but whether a replica can start
one more stream now without anyone's buffer running dry:

1. Replicas that are not ready, or draining, take nothing.
2. First, replicas with a free turn (`headroom` > 0: under their adaptive limit, nobody
   queued, no listener behind), the most headroom first. A replica that already holds the
   request's voice prefix goes first among them unless another has clearly more room
   (`VOICE_PREFERENCE_STREAMS` more): its prefix is cached, the others would load it.
3. Then replicas where the stream would queue, shortest expected wait first (requests
   queued ahead per stream of limit).
4. Last, replicas whose listeners are already behind: one more stream there makes them
   later still; they are used only when nothing else is up.

A replica appears in one rank only; a rank is a list in order of preference.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from polyvox.server.admission import Admission

VOICE_PREFERENCE_STREAMS = 2  # free streams more elsewhere that outweigh a cached voice


@dataclass(frozen=True)
class ReplicaLoad:
    """What a replica reports about itself (its admission state, polyvox/server/admission.py)."""

    replica_id: str
    is_ready: bool = True
    is_draining: bool = False
    limit: int = 1  # streams it may run at once now (predicted and reactive)
    running: int = 0
    queued: int = 0
    behind: int = 0  # its listeners whose audio has run out
    voices: frozenset[str] = field(default_factory=frozenset)  # voice prefixes it holds

    @property
    def headroom(self) -> int:
        """Streams it could start now without waiting (as Admission.headroom)."""
        if self.behind:
            return 0
        return max(0, self.limit - self.running - self.queued)

    @property
    def expected_wait(self) -> float:
        """Queued requests ahead of a new one, per stream of limit (in service times)."""
        return (self.queued + 1) / max(1, self.limit)


def rank_replicas(replicas: list[ReplicaLoad], voice: str | None = None
                  ) -> list[list[ReplicaLoad]]:
    """The replicas that may take a new stream with `voice`, best rank first (see the
    module doc); empty when none is ready."""
    up = [r for r in replicas if r.is_ready and not r.is_draining]
    free = sorted((r for r in up if r.headroom > 0), key=lambda r: -r.headroom)
    if voice is not None and free:
        most = free[0].headroom
        holders = [r for r in free
                   if voice in r.voices and r.headroom + VOICE_PREFERENCE_STREAMS > most]
        free = holders + [r for r in free if r not in holders]
    waiting = sorted((r for r in up if r.headroom == 0 and not r.behind),
                     key=lambda r: r.expected_wait)
    behind = sorted((r for r in up if r.behind), key=lambda r: (r.behind, r.expected_wait))
    return [rank for rank in (free, waiting, behind) if rank]


def replica_load(replica_id: str, admission: Admission, behind: int,
                 voices: Iterable[str] = (), is_draining: bool = False) -> ReplicaLoad:
    """What a replica reports, from its admission state and its engine's count of
    listeners behind."""
    return ReplicaLoad(replica_id, is_ready=admission.is_ready, is_draining=is_draining,
                       limit=admission.current_limit, running=admission.num_running,
                       queued=admission.num_queued, behind=behind, voices=frozenset(voices))
