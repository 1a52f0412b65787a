"""OpenMP pools: the thread that loaded a model gives its workers up while the engine
thread runs (polyvox/engine/threads.py)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import make_engine, params

from polyvox.engine.async_engine import AsyncEngine
from polyvox.engine.threads import loaded_libgomps, run_single_threaded, single_threaded_openmp

pytestmark = pytest.mark.skipif(
    not loaded_libgomps() or not os.path.isdir("/proc/self/task"),
    reason="needs libgomp (Linux PyTorch)")

THREADS = 2  # OpenMP threads of each scenario's thread (other tests change PyTorch's)


def _tasks() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/task")}


def _tasks_without(gone: set[int], timeout: float = 2.0) -> set[int]:
    """This process's threads once those in `gone` have exited (a released worker leaves
    just after the release returns), or as they are at the timeout."""
    deadline = time.monotonic() + timeout
    while (tasks := _tasks()) & gone and time.monotonic() < deadline:
        time.sleep(0.01)
    return tasks


def _parallel_work() -> torch.Tensor:
    """Element-wise work large enough for PyTorch to open a parallel region."""
    x = torch.linspace(-3, 3, 1 << 22)
    return torch.exp(x).sum()


def _in_thread(function: Callable[[], Any]) -> Any:
    """Run `function` in a fresh thread (its own OpenMP pool) whose parallel regions use
    THREADS threads, and return its result."""
    result: dict[str, Any] = {}

    def target() -> None:
        # NOTE: PyTorch gives a new thread its process-wide setting on first use (here,
        # get_num_threads); the thread's own OpenMP count is then set directly, which
        # leaves that process-wide setting alone.
        torch.get_num_threads()
        for library in loaded_libgomps():
            library.omp_set_num_threads(THREADS)
        try:
            result["value"] = function()
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread
            result["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def test_a_thread_gives_up_its_workers_and_computes_the_same() -> None:
    def scenario() -> dict[str, Any]:
        before = _tasks()
        reference = _parallel_work()
        workers = _tasks() - before  # the pool this thread's first parallel region made
        restore = single_threaded_openmp()
        after_release = _tasks_without(workers)
        alone = _parallel_work()
        after_alone = _tasks()
        max_alone = loaded_libgomps()[0].omp_get_max_threads()
        restore()
        max_restored = loaded_libgomps()[0].omp_get_max_threads()
        return dict(workers=workers, after_release=after_release, after_alone=after_alone,
                    reference=reference, alone=alone, max_alone=max_alone,
                    max_restored=max_restored)

    main_threads = loaded_libgomps()[0].omp_get_max_threads()
    seen = _in_thread(scenario)
    assert len(seen["workers"]) == THREADS - 1
    assert not seen["workers"] & seen["after_release"]  # the workers have exited
    assert not seen["after_alone"] - seen["after_release"]  # and no new ones came
    assert seen["max_alone"] == 1
    assert seen["max_restored"] == THREADS
    torch.testing.assert_close(seen["alone"], seen["reference"], rtol=1e-5, atol=0)
    # Only the calling thread changed: this one's setting is untouched.
    assert loaded_libgomps()[0].omp_get_max_threads() == main_threads


def test_restore_belongs_to_the_releasing_thread() -> None:
    restore = _in_thread(single_threaded_openmp)
    with pytest.raises(RuntimeError, match="same thread|released them"):
        restore()


def test_helper_threads_run_model_code_without_a_pool() -> None:
    def scenario() -> tuple[set[int], torch.Tensor]:
        before = _tasks()
        value = run_single_threaded(_parallel_work)
        return _tasks() - before, value

    new_threads, value = _in_thread(scenario)
    assert not new_threads
    torch.testing.assert_close(value, _parallel_work(), rtol=1e-5, atol=0)


def test_async_engine_frees_the_starting_threads_pool_until_it_stops(model) -> None:
    """The thread that starts the runtime (here, one that ran model code first, as a
    loading thread does) keeps no OpenMP workers while the engine thread runs, streams
    still come out, and its thread count comes back at stop()."""
    engine = make_engine(model)
    runtime = AsyncEngine(engine)

    async def one_stream() -> int:
        samples = 0
        async for chunk in runtime.generate("Hello there, world.", "default", params(3)):
            samples += chunk.samples.numel()
        return samples

    def scenario() -> dict[str, Any]:
        before = _tasks()
        _parallel_work()
        workers = _tasks() - before
        runtime.start()
        try:
            during = _tasks_without(workers)
            max_during = loaded_libgomps()[0].omp_get_max_threads()
            samples = asyncio.run(one_stream())
        finally:
            runtime.stop()
        return dict(workers=workers, during=during, max_during=max_during, samples=samples,
                    max_after=loaded_libgomps()[0].omp_get_max_threads())

    seen = _in_thread(scenario)
    assert seen["workers"] and not seen["workers"] & seen["during"]
    assert seen["max_during"] == 1
    assert seen["samples"] > 0
    assert seen["max_after"] == THREADS
    assert engine.is_idle()
