"""The FastAPI app: routes, error handling, and the model's life (loaded in the background
at startup, so /health answers at once and /ready says when requests will be taken).

    GET  /health                 alive (never needs the API key)
    GET  /ready                  200 once the model is loaded, 503 before and at shutdown
    GET  /v1/models              the served model and the OpenAI names that mean it
    POST /v1/audio/speech        speech.py
    WS   /v1/audio/stream        websocket.py
    GET|POST|DELETE /v1/voices   voices.py
    GET  /metrics                Prometheus metrics
    GET  /debug/state            engine pools (only with debug_state)
    GET  /                       page.py
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from polyvox.engine.calibrate import calibrate, warm_up
from polyvox.engine.threads import single_threaded_openmp
from polyvox.server import load_file, page, speech, voices, websocket
from polyvox.server.auth import require_api_key
from polyvox.server.catalog import OPENAI_MODELS
from polyvox.server.config import ServerConfig
from polyvox.server.errors import APIError, install_error_handlers
from polyvox.server.state import ServerState
from polyvox.server.voice_store import VoiceStore
from polyvox.serving import DEFAULT_VOICE, Served, length_cap_overrides, load_served
from polyvox.startup import StartupTimes

log = logging.getLogger(__name__)
Loader = Callable[[ServerState], Awaitable[Any]]  # loads the served model (create_app)
ADMIT_EVERY_SECONDS = 0.1  # queued requests are let in at least this often
SAVE_LOAD_EVERY_TICKS = 300  # the load model is saved every 30 s


def create_app(config: ServerConfig,
               on_ready: Callable[[Served, StartupTimes], None] | None = None,
               on_fatal: Callable[[str], None] | None = None,
               process_seconds: float | None = None,
               loader: Loader | None = None,
               routers: Sequence[APIRouter] = ()) -> FastAPI:
    """`on_ready` runs once the model is loaded; `on_fatal` when it cannot be (the CLI
    stops the server then). `process_seconds`: how long the process ran before (the
    CLI's imports and setup), the first phase of the start's report. `loader`: what
    loads the served model (default: the model in this process, `load_engine`; a
    cluster's ingress loads its replicas: polyvox/cluster/deploy.py); `routers`: more
    endpoints."""
    state = ServerState(config)
    load = loader or load_engine
    if process_seconds is not None:
        state.startup.add("process", process_seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        loading = asyncio.create_task(_load(state, load, on_ready, on_fatal))
        admitting = asyncio.create_task(_admit_periodically(state))
        try:
            yield
        finally:
            state.admission.is_ready = False
            tasks = (loading, admitting, *state.tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if state.loaded is not None:
                await asyncio.to_thread(state.loaded.stop)
                if state.admission.capacity is not None and state.load_path is not None:
                    load_file.save(state.loaded.engine.load, state.load_path)

    # NOTE: no /docs or /openapi.json: they would be open without the key; see docs/.
    app = FastAPI(title="polyvox", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.polyvox = state
    install_error_handlers(app)
    app.add_middleware(speech.RefuseEarly)
    app.include_router(_service_router(config))
    app.include_router(speech.router)
    app.include_router(websocket.router)
    app.include_router(voices.router)
    app.include_router(page.router)
    for router in routers:
        app.include_router(router)
    return app


async def _load(state: ServerState, load: Loader,
                on_ready: Callable[[Served, StartupTimes], None] | None,
                on_fatal: Callable[[str], None] | None) -> None:
    config = state.config
    try:
        served = await load(state)
    except Exception as error:  # noqa: BLE001 - reported, and the server stops
        reason = error.args[0] if isinstance(error, KeyError) and error.args else error
        state.load_error = f"cannot load model {config.model!r}: {reason}"
        log.error("%s", state.load_error)
        if on_fatal is not None:
            on_fatal(state.load_error)
        return
    _freeze_long_lived()
    state.admission.is_ready = True
    if on_ready is not None:
        on_ready(served, state.startup)


def _freeze_long_lived() -> None:
    """Keep what is alive once the model is loaded (weights, modules, imports: ~220,000
    objects) out of Python's later full garbage collections. The collector holds the GIL
    while it walks every tracked object: a full collection with the model's objects in
    view took 115-166 ms, and one during an overload run stopped the event loop for
    119 ms, every request on the server waiting behind it (docs/perf.md). Objects made
    later are collected as before; those kept here are still freed by reference counting."""
    gc.collect()
    gc.freeze()


async def load_engine(state: ServerState) -> Served:
    """The model in this process, with its engine, admission's view of it and the voices
    saved by earlier runs."""
    config = state.config
    state.load_path = load_file.load_file(config)
    served = await asyncio.to_thread(_load_served, config, state.load_path,
                                     state.startup)
    # NOTE: the resampler's scipy.signal (resample.py) is imported after the model, not
    # beside it: two threads importing at once can fail a start ("dictionary changed size
    # during iteration", seen once in CI), which costs more than its 0.3 s of overlap.
    await asyncio.to_thread(importlib.import_module, "scipy.signal")
    served.start()
    state.loaded = served
    state.admission.pressure = lambda: served.engine.num_behind > 0
    if config.calibrate_seconds > 0:  # else: admission by the reactive limit alone
        state.admission.capacity = lambda: served.engine.load.capacity()
        state.admission.wait_budget = served.engine.load.wait_budget
    state.voices = VoiceStore(served, config.data_dir, config.max_voice_seconds,
                              config.min_voice_seconds)
    with state.startup.measure("voices"):
        await state.voices.load()
    return served


async def _admit_periodically(state: ServerState) -> None:
    """Let queued requests in as the predicted capacity grows (not only when a stream
    ends), and save what the load model learned now and then (a killed server keeps it);
    how late each tick wakes is the event loop's lag (a metric)."""
    ticks = 0
    clock = asyncio.get_running_loop().time
    while True:
        asked = clock()
        await asyncio.sleep(ADMIT_EVERY_SECONDS)
        state.metrics.loop_lag.observe(max(0.0, clock() - asked - ADMIT_EVERY_SECONDS))
        state.admission.let_in()
        ticks += 1
        if (state.admission.capacity is not None and state.loaded is not None
                and state.load_path is not None and ticks % SAVE_LOAD_EVERY_TICKS == 0):
            await asyncio.to_thread(load_file.save, state.loaded.engine.load,
                                    state.load_path)


def _load_served(config: ServerConfig, load_path: Path, startup: StartupTimes) -> Served:
    """The model, with what admission needs to know about it (the load model saved by an
    earlier start, else a short calibration), warmed up, on a helper thread, which then
    gives up its OpenMP workers: they would slow the engine thread's parallel regions
    (polyvox/engine/threads.py). Each phase's time goes to `startup`."""
    served = load_served(config.model, weights=config.weights, tokenizer=config.tokenizer,
                         config=config.engine, device=config.device, seed=config.seed,
                         precision=config.precision, startup=startup)
    if config.no_eos:
        served.param_overrides = length_cap_overrides(served.family)
    if config.calibrate_seconds > 0:
        load_file.restore(served.engine.load, load_path)
    if config.calibrate_seconds > 0 and not served.engine.load.is_fitted:
        log.warning("calibrating admission: up to %g s of synthetic load to learn what the "
                    "engine sustains (once: saved in %s)", config.calibrate_seconds,
                    load_path)
        with startup.measure("calibration"):
            capacity = calibrate(served.engine, DEFAULT_VOICE, served.params,
                                 config.max_streams, config.calibrate_seconds)
        log.info("calibrated: the engine is predicted to sustain %d streams", capacity)
        load_file.save(served.engine.load, load_path)
    served.engine.load.set_ttfa_floor(config.ttfa_floor_seconds)  # after calibration's
    with startup.measure("warm-up"):
        warm_up(served.engine, DEFAULT_VOICE, served.params(seed=0))
    single_threaded_openmp()
    return served


def _service_router(config: ServerConfig) -> APIRouter:
    router = APIRouter()
    protected = [Depends(require_api_key)]

    @router.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/ready", dependencies=protected)
    async def ready(request: Request) -> JSONResponse:
        state: ServerState = request.app.state.polyvox
        served = state.served  # 503 with Retry-After until ready
        admission = state.admission
        return JSONResponse({"status": "ready", "model": served.name,
                             "sample_rate": served.sample_rate,
                             "streams": admission.num_running, "queued": admission.num_queued,
                             "limit": admission.current_limit,
                             "headroom": admission.headroom,
                             "startup_seconds": state.startup.phases})

    @router.get("/v1/models", dependencies=protected)
    async def list_models(request: Request) -> dict[str, Any]:
        served = request.app.state.polyvox.served
        return {"object": "list", "data": [_model(name, served.name)
                                           for name in (served.name, *OPENAI_MODELS)]}

    @router.get("/v1/models/{model_id:path}", dependencies=protected)
    async def get_model(model_id: str, request: Request) -> dict[str, Any]:
        served = request.app.state.polyvox.served
        if model_id not in (served.name, *OPENAI_MODELS):
            raise APIError(404, f"no model {model_id!r}: this server serves {served.name!r}",
                           param="model", code="model_not_found")
        return _model(model_id, served.name)

    @router.get("/metrics", dependencies=protected)
    async def metrics(request: Request) -> Response:
        state: ServerState = request.app.state.polyvox
        if state.loaded is not None and state.admission.is_ready:
            pools = await state.loaded.engine_state()
            if pools is not None:
                state.metrics.set_engine_state(pools)
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    if config.debug_state:
        @router.get("/debug/state", dependencies=protected)
        async def debug_state(request: Request) -> dict[str, Any]:
            state: ServerState = request.app.state.polyvox
            snapshot = await state.served.engine_state() or {}
            admission = state.admission
            return {**snapshot, "admission_running": admission.num_running,
                    "admission_queued": admission.num_queued,
                    "admission_limit": admission.current_limit,
                    "admission_headroom": admission.headroom}

    return router


def _model(name: str, served_name: str) -> dict[str, Any]:
    model: dict[str, Any] = {"id": name, "object": "model", "created": 0, "owned_by": "polyvox"}
    if name != served_name:
        model["alias_of"] = served_name
    return model
