"""In-process benchmark clients: closed loop, open loop, and the pocket-tts baseline.

Every client records, per request, when it sent the request and when each chunk arrived
(client-side clock, `time.monotonic`); polyvox.bench.metrics turns records into figures.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

from polyvox.bench.records import RequestRecord
from polyvox.bench.workloads import Workload, run_closed_loop, run_open_loop
from polyvox.serving import Served


async def _one_request(served: Served, text: str, seed: int, mode: str, concurrency: int,
                       request_id: str) -> RequestRecord:
    record = RequestRecord(request_id, mode, concurrency, sent=time.monotonic(),
                           sample_rate=served.sample_rate, text=text)
    try:
        async for chunk in served.runtime.generate(text, "default", served.params(seed=seed),
                                                   request_id=request_id):
            record.add_chunk(time.monotonic(), int(chunk.samples.numel()))
        record.finished = time.monotonic()
    except Exception as error:  # recorded, counted as an error in the report
        record.error = repr(error)
    return record


async def closed_loop(served: Served, texts: Workload, concurrency: int,
                      requests_per_client: int, mode: str) -> tuple[list[RequestRecord], float]:
    """`concurrency` clients, each sending its next request when the previous finished."""
    return await run_closed_loop(partial(_one_request, served), texts, concurrency,
                                 requests_per_client, mode)


async def open_loop(served: Served, texts: Workload, rate: float, duration: float, mode: str,
                    seed: int = 0, burstiness: float = 1.0) -> tuple[list[RequestRecord], float]:
    """Arrivals at `rate` per second for `duration` seconds (see `run_open_loop`)."""
    return await run_open_loop(partial(_one_request, served), texts, rate, duration, mode,
                               seed, burstiness)


# --- the reference implementation's own loop --------------------------------------------


class PocketBaseline:
    """pocket-tts' TTSModel on the same config and weights as a polyvox Pocket model."""

    def __init__(self, family: Any, workdir: Any) -> None:
        import safetensors.torch
        import torch
        import yaml

        from polyvox.models.pocket.config import config_to_dict

        threads = torch.get_num_threads()
        import pocket_tts  # NOTE: importing it sets torch to one thread; restored below
        from pocket_tts.modules.stateful_module import init_states

        torch.set_num_threads(threads)
        weights = workdir / "model.safetensors"
        safetensors.torch.save_file(family.modules.state_dict(), str(weights))
        data = config_to_dict(family.config)
        data["weights_path"] = str(weights)
        data.pop("weights_path_without_voice_cloning", None)
        data["flow_lm"]["lookup_table"]["tokenizer_path"] = str(family.tokenizer.path)
        config_file = workdir / "config.yaml"
        config_file.write_text(yaml.safe_dump(data))
        self.model = pocket_tts.TTSModel.load_model(config=str(config_file))
        self.state = init_states(self.model.flow_lm, 1, 0)
        self.sample_rate = self.model.sample_rate

    def stream(self, text: str) -> Iterator[Any]:
        return self.model.generate_audio_stream(self.state, text, copy_state=True)

    def disable_eos(self) -> None:
        """Match polyvox's benchmark setting for random weights: run to the length cap."""
        self.model.eos_threshold = float("inf")


def baseline_run(baseline: PocketBaseline, texts: Workload, concurrency: int,
                 requests_per_client: int, mode: str) -> tuple[list[RequestRecord], float]:
    """Closed loop over pocket-tts' generator, one thread per client (as its server does)."""
    records: list[RequestRecord] = []
    lock = threading.Lock()

    def client(index: int) -> None:
        for turn in range(requests_per_client):
            number = turn * concurrency + index
            text = texts(number)
            record = RequestRecord(f"{mode}-{number}", mode, concurrency, time.monotonic(),
                                   sample_rate=baseline.sample_rate, text=text)
            try:
                for chunk in baseline.stream(text):
                    record.add_chunk(time.monotonic(), int(chunk.numel()))
                record.finished = time.monotonic()
            except Exception as error:
                record.error = repr(error)
            with lock:
                records.append(record)

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return records, time.monotonic() - started
