"""Resampling a stream chunk by chunk, with the same output as resampling it whole.

Clients ask for a sample rate (OpenAI's `pcm` is 24 kHz, Opus takes only a few rates, a
WebSocket session may want its player's rate) that is not always the model's. Each chunk
is resampled as it arrives; the concatenated output equals
`scipy.signal.resample_poly(whole_signal, up, down)` (same filter, same alignment).
"""

from __future__ import annotations

from math import gcd

import numpy as np

# NOTE: scipy.signal is imported where a resampler needs it, not with this module: the
# import costs ~0.7 s, a third of a server's start, and the server preloads it beside the
# model (app.py) instead of before it.


class StreamingResampler:
    """Polyphase FIR resampling from `from_rate` to `to_rate` Hz, fed in pieces.

    NOTE (the invariant): the buffer starts at an input index that is a multiple of
    `down`, so its outputs fall on the global output grid; an output is emitted only once
    every input its filter touches has arrived (or the stream has ended: then the inputs
    after the end are zeros, as in resample_poly).
    """

    def __init__(self, from_rate: int, to_rate: int) -> None:
        divisor = gcd(from_rate, to_rate)
        self.up, self.down = to_rate // divisor, from_rate // divisor
        self.buffer = np.zeros(0)  # inputs from global index `start` on
        self.start = 0
        self.num_in = 0
        if self.is_identity:
            return
        from scipy.signal import firwin, upfirdn

        self._upfirdn = upfirdn
        half_len = 10 * max(self.up, self.down)
        taps = firwin(2 * half_len + 1, 1.0 / max(self.up, self.down), window=("kaiser", 5.0))
        pre_pad = self.down - half_len % self.down  # resample_poly's centring
        self.taps = np.concatenate([np.zeros(pre_pad), taps * self.up])
        self.skip = (half_len + pre_pad) // self.down  # leading outputs resample_poly drops
        self.next_out = self.skip  # next upfirdn output index to emit

    @property
    def is_identity(self) -> bool:
        return self.up == self.down

    def process(self, samples: np.ndarray) -> np.ndarray:
        """Resample the next piece [N] -> [M] float32 (M may be 0 while the filter fills)."""
        if self.is_identity:
            return samples.astype(np.float32, copy=False)
        self.buffer = np.concatenate([self.buffer, samples.astype(np.float64)])
        self.num_in += len(samples)
        last = (self.num_in - 1) * self.up // self.down  # its newest input has arrived
        return self._emit(last)

    def finish(self) -> np.ndarray:
        """The stream ended: the outputs that were waiting for inputs past its end."""
        if self.is_identity or self.num_in == 0:
            return np.zeros(0, np.float32)
        total = -(-self.num_in * self.up // self.down)  # ceil(N * up / down)
        tail = len(self.taps) // self.up + 1
        self.buffer = np.concatenate([self.buffer, np.zeros(tail)])
        return self._emit(self.skip + total - 1)

    def _emit(self, last: int) -> np.ndarray:
        if last < self.next_out:
            return np.zeros(0, np.float32)
        offset = self.start * self.up // self.down  # global index of the buffer's output 0
        out: np.ndarray = self._upfirdn(self.taps, self.buffer, self.up, self.down)
        out = out[self.next_out - offset: last - offset + 1]
        self.next_out = last + 1
        lowest = -(-(self.next_out * self.down - len(self.taps) + 1) // self.up)
        keep_from = max(self.start, lowest // self.down * self.down)
        self.buffer = self.buffer[keep_from - self.start:]
        self.start = keep_from
        return out.astype(np.float32)
