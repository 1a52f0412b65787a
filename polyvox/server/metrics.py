"""Prometheus metrics, in a registry of the app's own (several apps can live in one
process, as in tests).

Streams: time to first audio, real-time factor, audio produced, how streams ended.
Load: streams running and queued (admission), requests refused and how fast, the event
loop's lag, and the engine's pools
(KV blocks, decoder slots, requests inside the engine), read on the engine thread at
each scrape.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from polyvox.server.admission import Admission

QUEUE_WAIT_BUCKETS = (0.001, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
# NOTE: fine below 0.3 s, where first audio should be: a run's p90 is read from these
# (polyvox bench --url, server_view.py), interpolated within a bucket.
TTFA_BUCKETS = (0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.1, 0.12, 0.14, 0.16,
                0.18, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
RTF_BUCKETS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Metrics:
    def __init__(self, admission: Admission) -> None:
        self.registry = registry = CollectorRegistry()
        self.ttfa = Histogram("polyvox_ttfa_seconds", "Time from request to first audio "
                              "(WebSocket: from an utterance's first text)", ["endpoint"],
                              buckets=TTFA_BUCKETS, registry=registry)
        self.rtf = Histogram("polyvox_rtf", "Real-time factor of finished streams: seconds "
                             "spent generating per second of audio", ["endpoint"],
                             buckets=RTF_BUCKETS, registry=registry)
        self.audio_seconds = Counter("polyvox_audio_seconds", "Seconds of audio sent",
                                     ["endpoint"], registry=registry)
        self.streams = Counter("polyvox_streams", "Streams by how they ended (completed, "
                               "disconnected, failed, cancelled)", ["endpoint", "outcome"],
                               registry=registry)
        self.queue_wait = Histogram("polyvox_queue_wait_seconds", "Time an admitted request "
                                    "waited for its turn (0 when one was free)",
                                    buckets=QUEUE_WAIT_BUCKETS, registry=registry)
        self.rejected = Counter("polyvox_rejected", "Requests refused by admission control",
                                ["reason"], registry=registry)
        self.refusal = Histogram("polyvox_refusal_seconds", "Time from a request's handler "
                                 "starting to its refusal by admission control (429/503)",
                                 buckets=LATENCY_BUCKETS, registry=registry)
        self.loop_lag = Histogram("polyvox_event_loop_lag_seconds", "How late the event "
                                  "loop woke for a timer (every 0.1 s): what any request's "
                                  "handling waits behind on the server", buckets=LATENCY_BUCKETS,
                                  registry=registry)
        self.bad_requests = Counter("polyvox_bad_requests", "Requests refused as invalid",
                                    ["endpoint"], registry=registry)
        running = Gauge("polyvox_active_streams", "Streams generating now", registry=registry)
        running.set_function(lambda: admission.num_running)
        queued = Gauge("polyvox_queued_requests", "Requests waiting for a turn",
                       registry=registry)
        queued.set_function(lambda: admission.num_queued)
        limit = Gauge("polyvox_admission_limit_streams", "Streams admission lets generate at "
                      "once now: predicted capacity, reactive limit and --max-streams",
                      registry=registry)
        limit.set_function(lambda: admission.current_limit)
        headroom = Gauge("polyvox_admission_headroom_streams", "Streams that could be "
                         "admitted now without waiting", registry=registry)
        headroom.set_function(lambda: admission.headroom)
        self.engine = {
            name: Gauge(f"polyvox_{name}", help_text, registry=registry)
            for name, help_text in (
                ("kv_blocks_used", "KV cache blocks in use (voices included)"),
                ("kv_blocks_free", "KV cache blocks free"),
                ("decoder_slots_used", "Decoder state slots in use"),
                ("decoder_slots_free", "Decoder state slots free"),
                ("engine_running", "Requests running inside the engine"),
                ("engine_waiting", "Requests waiting inside the engine"),
            )
        }

    def set_engine_state(self, state: dict[str, Any]) -> None:
        for name, gauge in self.engine.items():
            gauge.set(state[name])

    def render(self) -> bytes:
        return generate_latest(self.registry)


def engine_state(engine: Any) -> dict[str, Any]:
    """The engine's pools and queues; call on the engine thread (runtime.call)."""
    return {
        "kv_blocks_used": engine.blocks.num_used,
        "kv_blocks_free": engine.blocks.num_free,
        "decoder_slots_used": len(engine.slots.in_use),
        "decoder_slots_free": engine.slots.num_free,
        "engine_running": len(engine.streams.running),
        "engine_waiting": len(engine.streams.waiting),
        "engine_requests": len(engine.requests),
        "voice_blocks": sum(len(v.table.blocks) for v in engine.voices.values()),
        "is_idle": engine.is_idle(),
        "is_consistent": engine.check_integrity(),
    }
