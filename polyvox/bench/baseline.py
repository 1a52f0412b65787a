"""The pocket-tts baseline: the pocket-tts package's own generation loop on the same
config and weights as the polyvox model under test, measured by the same records.

pocket-tts runs its own float32 modules, whatever polyvox's --precision: its rows are
float32 rows (comparison.py compares like with like).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

from polyvox.bench.records import RequestRecord
from polyvox.bench.workloads import Workload

PRECISION = "float32"


class Baseline(Protocol):
    """A reference generator: PocketBaseline, or the tests' simulated one."""

    sample_rate: int

    def stream(self, text: str) -> Iterator[Any]:
        """The audio of `text`, chunk by chunk (tensors: only `numel()` is read)."""
        ...

    def disable_eos(self) -> None:
        """Run every request to the length cap (random weights, as polyvox's bench)."""
        ...


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


def baseline_run(baseline: Baseline, texts: Workload, concurrency: int,
                 requests_per_client: int, mode: str) -> tuple[list[RequestRecord], float]:
    """Closed loop over the baseline's generator, one thread per client (as pocket-tts'
    server does); times are `time.monotonic()`, the clock of asyncio's loops."""
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
