"""`polyvox serve --replicas N`: the server's endpoints in this process (the ingress), its
engines as N Ray Serve replicas.

    cluster = ClusterOptions(replicas=2)
    app = create_app(config, loader=cluster.loader(), routers=[cluster_router()])

`ClusterOptions.loader` starts a local Ray instance (or joins `ray_address`), deploys the
replicas with polyvox's request router (router.py), waits for them, and gives the server
a `ClusterServed` (ingress.py) with admission across the cluster. A background task
follows the replicas (joined, gone, draining) every `REFRESH_SECONDS`. At shutdown the
deployment is deleted, and the Ray instance stopped when this process started it.

Endpoints added: GET /v1/cluster (the replicas: id, pid, node, state, streams, limit,
listeners behind, start phases) and POST /v1/cluster/replicas/{id}/drain.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request

from polyvox.cluster.ingress import ClusterServed
from polyvox.cluster.replica import EngineReplica, ReplicaOptions
from polyvox.server.auth import require_api_key
from polyvox.server.errors import APIError
from polyvox.server.state import ServerState
from polyvox.server.voice_store import VoiceStore

log = logging.getLogger(__name__)
APP_NAME = "polyvox"
DEPLOYMENT = "polyvox-engine"
ORPHAN_AGENTS = (b"ray::DashboardAgent", b"ray::RuntimeEnvAgent")  # reap_orphaned_agents
REFRESH_SECONDS = 0.1  # how often the ingress reads the replicas' state
STATS_SECONDS = 0.2  # how often a replica reports its load to the router
METRICS_SECONDS = 0.5  # autoscaling: how often a replica reports its streams and limit
LOOK_BACK_SECONDS = 2.0  # autoscaling: the window the reports are averaged over
# a stream finishes on a replica being stopped (scale-down, upgrade) for up to this long
GRACEFUL_STOP_SECONDS = 120.0


@dataclass(frozen=True)
class ClusterOptions:
    replicas: int = 1  # with autoscaling: the fewest, and the replicas at start
    ray_address: str | None = None  # None: RAY_ADDRESS, else a local instance
    cpus_per_replica: float = 1.0
    threads: int = 0  # torch threads per replica (0: Ray's, one per CPU it reserves)
    max_replicas: int | None = None  # above `replicas`: autoscaling (autoscale.py)
    downscale_delay_s: float = 30.0  # a lower target holds this long before a replica stops

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError("replicas must be >= 1")
        if self.max_replicas is not None and self.max_replicas < self.replicas:
            raise ValueError("max_replicas must be >= replicas")
        if self.downscale_delay_s < 0:
            raise ValueError("downscale_delay_s must be >= 0")
        if self.cpus_per_replica < 0:
            raise ValueError("cpus_per_replica must be >= 0")

    def loader(self) -> Any:
        async def load(state: ServerState) -> ClusterServed:
            return await load_cluster(state, self)
        return load


def start_ray(options: ClusterOptions) -> bool:
    """Join the Ray cluster at `ray_address` (or $RAY_ADDRESS), else start a local one
    sized for the replicas; True when this process started it."""
    import ray

    if ray.is_initialized():
        return False
    address = options.ray_address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, namespace=APP_NAME, log_to_driver=False)
        return False
    reap_orphaned_agents()
    cpus = max(os.cpu_count() or 1, int(options.replicas * options.cpus_per_replica + 1))
    ray.init(num_cpus=cpus, include_dashboard=False, namespace=APP_NAME, log_to_driver=False)
    return True


def deploy(config: Any, options: ClusterOptions) -> Any:
    """Deploy the replicas (returns once they are all ready): their deployment handle."""
    from ray import serve
    from ray.serve.config import AutoscalingConfig, AutoscalingPolicy, RequestRouterConfig

    serve.start(proxy_location="Disabled")  # the ingress is this process's own server
    scaling: dict[str, Any] = {"num_replicas": options.replicas}
    if options.max_replicas is not None and options.max_replicas > options.replicas:
        scaling = {"autoscaling_config": AutoscalingConfig(
            min_replicas=options.replicas, initial_replicas=options.replicas,
            max_replicas=options.max_replicas, metrics_interval_s=METRICS_SECONDS,
            look_back_period_s=LOOK_BACK_SECONDS, upscale_delay_s=0.0,
            downscale_delay_s=options.downscale_delay_s,
            policy=AutoscalingPolicy(
                policy_function="polyvox.cluster.autoscale:streams_policy"))}
    deployment = serve.deployment(
        EngineReplica, name=DEPLOYMENT, **scaling,
        max_ongoing_requests=100_000,  # admission is the ingress's, not Serve's
        graceful_shutdown_timeout_s=GRACEFUL_STOP_SECONDS,
        health_check_period_s=2.0, health_check_timeout_s=30.0,
        ray_actor_options={"num_cpus": options.cpus_per_replica},
        request_router_config=RequestRouterConfig(
            request_router_class="polyvox.cluster.router.PolyvoxRouter",
            request_routing_stats_period_s=STATS_SECONDS,
            request_routing_stats_timeout_s=5.0))
    replica = deployment.bind(ReplicaOptions(config, options.threads))
    return serve.run(replica, name=APP_NAME, route_prefix=None)


async def load_cluster(state: ServerState, options: ClusterOptions) -> ClusterServed:
    """The loader of a cluster ingress (create_app's `loader`)."""
    config = state.config
    with state.startup.measure("ray"):
        started_ray = await asyncio.to_thread(start_ray, options)
    with state.startup.measure("replicas"):
        handle = await asyncio.to_thread(deploy, config, options)
        info = await handle.options(method_name="describe").remote()  # starts the router
    served = ClusterServed(handle, DEPLOYMENT, info, on_stop=lambda: shut_down(started_ray))
    for _ in range(100):
        await served.refresh()
        if served.has_ready:
            break
        await asyncio.sleep(REFRESH_SECONDS)
    state.loaded = served
    state.admission.max_running = state.admission.limit = 1_000_000  # the replicas' limits
    state.admission.pressure = None  # a replica behind lowers its own share (capacity())
    state.admission.capacity = served.capacity
    # NOTE: ClusterServed does what VoiceStore asks of a Served (names, voices, register)
    state.voices = VoiceStore(served, config.data_dir,  # type: ignore[arg-type]
                              config.max_voice_seconds, config.min_voice_seconds)
    with state.startup.measure("voices"):
        await state.voices.load()
    state.tasks.append(asyncio.create_task(_follow(state, served)))
    return served


async def _follow(state: ServerState, served: ClusterServed) -> None:
    """Keep the cluster's view current; admission is open while a replica is ready."""
    while True:
        await asyncio.sleep(REFRESH_SECONDS)
        try:
            await served.refresh()
        except Exception:  # noqa: BLE001 - a failed read is retried at the next tick
            log.exception("reading the replicas' state failed")
            continue
        state.admission.is_ready = served.has_ready  # queued requests: _admit_periodically


def shut_down(started_ray: bool) -> None:
    """At the ingress's exit: a local Ray instance this process started is stopped whole
    (replicas, Serve, Ray's own processes; its processes may already be going: a Ctrl-C or
    a service manager signals the whole process group, and Serve's controller would then
    never answer a delete); a joined cluster gets the deployment deleted."""
    import ray
    from ray import serve

    if started_ray:
        ray.shutdown()
        reap_orphaned_agents()
    else:
        serve.delete(APP_NAME, _blocking=False)


def reap_orphaned_agents() -> list[int]:
    """Stop Ray agent processes left without their node (their raylet gone, so their
    parent is init): a local instance whose ingress was killed (`kill -9`) or whose whole
    process group was signalled leaves its two agents running for good. Only this user's
    processes, only orphans; the pids stopped."""
    import signal

    reaped = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if entry.stat().st_uid != os.getuid():
                continue
            name = (entry / "cmdline").read_bytes().split(b"\0")[0].strip()
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == 1 and name in ORPHAN_AGENTS:
                os.kill(int(entry.name), signal.SIGKILL)
                reaped.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
    if reaped:
        log.warning("stopped %d Ray agent process(es) left by an earlier local instance: %s",
                    len(reaped), reaped)
    return reaped


def _starting() -> int | None:
    """Replicas Serve is starting (not yet running: a scale-up, a replacement)."""
    from ray import serve

    try:
        deployment = serve.status().applications[APP_NAME].deployments[DEPLOYMENT]
    except (KeyError, AttributeError):
        return None
    return sum(count for state, count in deployment.replica_states.items()
               if str(getattr(state, "value", state)) in ("STARTING", "UPDATING"))


def cluster_router() -> APIRouter:
    router = APIRouter(dependencies=[Depends(require_api_key)])

    def served_of(request: Request) -> ClusterServed:
        state: ServerState = request.app.state.polyvox
        served = state.served
        assert isinstance(served, ClusterServed)
        return served

    @router.get("/v1/cluster")
    async def describe(request: Request) -> dict[str, Any]:
        served = served_of(request)
        return {**served.describe(), "replicas_starting": await asyncio.to_thread(_starting)}

    @router.post("/v1/cluster/replicas/{replica_id}/drain")
    async def drain(replica_id: str, request: Request) -> dict[str, Any]:
        served = served_of(request)
        if replica_id not in served.replicas:
            raise APIError(404, f"no replica {replica_id!r}", param="replica_id")
        return (await served.drain(replica_id)).describe()

    return router
