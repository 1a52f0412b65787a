"""The Piper flow in torch (polyvox/models/piper/flow.py): the same z as onnxruntime's, and
computed as a stream, window by window, the same z as over the whole clause."""

from __future__ import annotations

import pytest
import torch

from polyvox.models.piper.flow import FlowWindow, PiperFlow

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def flow(joe_graph) -> PiperFlow:
    return PiperFlow.from_vits(joe_graph).eval()


def _prior(frames: int, rows: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, 192, frames, generator=torch.Generator().manual_seed(seed)) * 0.5


def test_layout_read_from_the_graph(flow: PiperFlow) -> None:
    # joe (a medium voice): 4 couplings of a 4-layer WaveNet with kernel 5, so z reads the
    # prior 32 frames either side: the front's FLOW_CONTEXT, found by hand before
    from polyvox.models.piper.front import FLOW_CONTEXT

    assert (len(flow.couplings), flow.depth, flow.reach) == (4, 4, 8)
    assert flow.context == FLOW_CONTEXT


def test_equals_the_graph_run_by_onnxruntime(flow: PiperFlow, joe_graph, relative_error
                                             ) -> None:
    from polyvox.models.piper.front import PiperFront

    prior = _prior(57)
    expected = PiperFront(joe_graph, num_threads=1).flow_from_prior(prior)
    with torch.no_grad():
        assert relative_error(flow(prior), expected) < 1e-5


@pytest.mark.parametrize("steps", [[48, 4, 4, 30, 9], [60, 20], [40]])
def test_streamed_windows_equal_the_whole_clause(flow: PiperFlow, relative_error,
                                                 steps: list[int]) -> None:
    """Windows as joe-ar's decoder sends them: the first from the clause's start, each
    later one `steps[i]` frames further on, the last one reaching the clause's end. A
    window's z is where it became final; joined, the whole clause's."""
    total = sum(steps)
    prior = _prior(total)
    reach, context = flow.reach, flow.context
    with torch.no_grad():
        whole = flow(prior)
        pieces, caches, known = [], [], 0
        for index, step in enumerate(steps):
            first, last = index == 0, index == len(steps) - 1
            start = 0 if first else known - 2 * reach
            known += step
            z, caches = flow.stream(prior[:, :, start: known], caches,
                                    FlowWindow(first=first, last=last))
            pieces.append(z)
        streamed = torch.cat(pieces, 2)
    assert streamed.shape == whole.shape
    assert relative_error(streamed, whole) < 1e-5
    if len(steps) > 1:  # a window before the last returns z only as far as it is final
        assert sum(p.shape[2] for p in pieces[:-1]) == sum(steps[:-1]) - context


def test_a_window_short_of_its_reach_is_not_the_whole_clause(flow: PiperFlow) -> None:
    """Without its input's last 2 x reach frames kept, a later window's z would differ: the
    caches carry what the edges of each window would otherwise zero."""
    prior = _prior(100)
    with torch.no_grad():
        whole = flow(prior)
        z0, caches = flow.stream(prior[:, :, :60], [], FlowWindow(first=True, last=False))
        blank = [torch.zeros_like(c) for c in caches]
        z1, _ = flow.stream(prior[:, :, 60 - 2 * flow.reach:], blank,
                            FlowWindow(first=False, last=True))
    assert (torch.cat([z0, z1], 2) - whole).abs().max() > 1e-2


def test_bfloat16_weights_stay_close(flow: PiperFlow, joe_graph, relative_error) -> None:
    low = PiperFlow.from_vits(joe_graph)
    low.lower_precision(torch.bfloat16)
    prior = _prior(40)
    with torch.no_grad():
        error = relative_error(low(prior), flow(prior))
    assert 0 < error < 3e-2
