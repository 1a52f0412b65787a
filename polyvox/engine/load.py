"""What the engine can sustain: a cost model learned from its own steps, for admission.

Every stream a listener plays needs one second of audio per second of wall time. Making
audio costs engine time, part shared by the streams of a step (the fixed cost of a call:
an AR step, a decoder call, a prefill call) and part per stream. So N streams playing in
real time keep the engine busy

    demand(N) = fixed + per_stream * N      engine seconds per wall second

and the engine sustains N while demand(N) stays under 1 with a margin. Both terms are
fitted (least squares, older windows fading) from windows of consecutive steps: a window
that spent `busy` seconds making `audio` seconds of audio with `N` streams sharing its
steps on average fits busy = fixed * audio / N + per_stream * audio. The margin is the
measured spread of those windows around the fit (a step slower than predicted eats into
the listeners' buffers), never under `MIN_MARGIN`.

Time is not all: a step that serves many streams at once (Piper starts whole clauses) can
leave a fresh listener's thin buffer dry while the engine still has time to spare. So the
model also remembers the fewest streams it saw listeners fall behind with, and predicts
fewer (trying one more after `FORGET_WINDOWS` windows that kept up, when its time
allows). One window behind among many that kept up with as many streams or more is a
hiccup (a pause of the host, a burst of HTTP work), not the load: a fall behind counts
only where at least `BEHIND_SHARE` of the recent windows with that many streams or more
fell behind.

First audio is a promise of its own. The model keeps the recent times to first audio
(from when the caller handed the request in) of the requests that shared their wait with
N other streams (running when they came, or coming before their first audio), for each N,
and takes their `TTFA_QUANTILE` (the p90 callers hear, not the mean: the wait for the step
then running is spread from nothing to a whole step, and grows with the load). Idle is the
median of the requests that had the engine to themselves (`idle_ttfa`). A line through
the loads' p90s (TTFA p90 = idle + per_other_stream x N, each load weighted by its
samples; its intercept stands for idle until enough requests had the engine to
themselves) predicts the loads not yet seen. It predicts no more streams than keep the p90 within
`TTFA_FACTOR` times idle (or a floor, by default `MIN_TTFA_TARGET_SECONDS`; an operator
may set another: `set_ttfa_floor`), measured where measured, else by the line; the same
tells a queued caller how long it may wait (`wait_budget`). Before there is enough to fit,
and beyond what has been seen, it is cautious: no more than one stream over the most it has seen the
engine keep up with (`EXPLORE_SHARE` more once the fit is good). A server calibrates it
at its first start (polyvox/engine/calibrate.py). A fitted model can be saved and
loaded (`state()` / `restore()`), so a restarted server starts from what it learned.

Nothing here reads a clock: the engine passes measured durations.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

MIN_MARGIN = 0.15  # of the engine's time, always kept free
MIN_WINDOW_AUDIO_SECONDS = 2.0  # a window closes once its steps made this much audio
MIN_WINDOW_BUSY_SECONDS = 1.0  # ... and were busy this long (many steps, not one)
FADING = 0.97  # weight of the past at each new window (~30 windows remembered)
MIN_WINDOWS = 4  # windows needed before the fit is used
EXPLORE_SHARE = 0.5  # beyond the most streams seen keeping up, predict at most this more
# A new stream's first audio within this many times an idle engine's, or within
# MIN_TTFA_TARGET_SECONDS where that is longer: nobody hears 50 ms become 100 ms.
TTFA_FACTOR = 2.0
MIN_TTFA_TARGET_SECONDS = 0.25
TTFA_QUANTILE = 0.9  # the first audio callers hear is promised at this quantile
TTFA_SAMPLES_PER_LOAD = 64  # recent first audios kept for each count of other streams
# a count of other streams counts from this many first audios (with 10, one outlier moves
# the p90 a tenth of the way to it)
MIN_TTFA_SAMPLES = 10
MAX_TTFA_LOAD = 64  # requests that shared the engine with more count as this many
# a load no request has met for this many first audios starts to be forgotten
TTFA_FORGET_FIRST_AUDIOS = 1000
# windows kept up (~5 minutes of load) after which one stream more than fell behind is
# tried, if the engine's time allows: trying costs the tried stream's listeners a stall
FORGET_WINDOWS = 300
# a fall behind with N streams caps the prediction below N when at least this share of the
# recent windows (faded as the fit's) with N streams or more fell behind
BEHIND_SHARE = 0.1
SPREAD_SIGMAS = 2.0  # margin = this many standard deviations of the relative error
COLD_MARGIN = 0.25  # before there are MIN_WINDOWS windows


@dataclass
class _Window:
    busy: float = 0.0  # engine seconds spent in steps
    audio: float = 0.0  # audio seconds they made
    stream_seconds: float = 0.0  # sum over steps of (streams sharing it x its seconds)
    behind: bool = False  # a listener fell behind during the window

    @property
    def mean_streams(self) -> float:
        return self.stream_seconds / self.busy if self.busy > 0 else 0.0


@dataclass
class _FirstAudios:
    """The recent times to first audio (oldest first) of the requests that shared their
    wait with one count of other streams."""

    samples: deque[float] = field(default_factory=lambda: deque(maxlen=TTFA_SAMPLES_PER_LOAD))
    last_seen: int = 0  # the model's count of first audios when this load last had one


class LoadModel:
    """demand(N) = fixed + per_stream * N, fitted from the engine's steps."""

    def __init__(self) -> None:
        # Faded sums of the normal equations of busy = fixed * audio / N + per_stream *
        # audio, each window divided by its busy time (so the residuals are relative
        # errors): features x = (audio / N / busy, audio / busy), target 1.
        self._sxx = [[0.0, 0.0], [0.0, 0.0]]
        self._sxy = [0.0, 0.0]
        self._num_windows = 0.0  # faded count (= the sum of the targets' squares)
        self.fixed = 0.0  # engine seconds per wall second, whatever the streams
        self.per_stream = 0.0  # engine seconds per wall second per stream playing
        self.most_kept_up = 0  # most streams seen sharing steps while nobody was behind
        # fewest streams seen sharing steps while a listener fell behind (None: never);
        # raised by one after FORGET_WINDOWS windows kept up (a hiccup must not cap for
        # ever) when the time model says it fits
        self.fewest_behind: int | None = None
        self._windows_since_behind = 0
        # recent windows by streams (rounded): faded counts of [kept up, fell behind]
        self._windows_at: dict[int, list[float]] = {}
        # by the other streams that shared each request's wait
        self._ttfa: dict[int, _FirstAudios] = {}
        self._first_audios = 0  # first audios observed since the start (or restore)
        # NOTE: what the samples say, published whole (a new tuple each time) by the thread
        # that learns: admission reads it from the server's event loop while the engine
        # thread files first audios, and reading the samples themselves then could see a
        # load half added or forgotten. (the line or None, {load: TTFA p90} of the loads
        # with MIN_TTFA_SAMPLES first audios, the idle first audio or None)
        self._ttfa_view: tuple[tuple[float, float] | None, dict[int, float],
                               float | None] = (None, {}, None)
        # what the TTFA samples cap the streams at (None: they do not tell yet)
        self._ttfa_capacity: int | None = None
        # a new caller's first audio is kept within TTFA_FACTOR x an idle engine's or
        # this, whichever is longer (set_ttfa_floor: an operator's choice)
        self.ttfa_floor = MIN_TTFA_TARGET_SECONDS
        self.is_learning = True  # observe_step learns (calibration pauses it at times)
        self._window = _Window()

    # --- learning -------------------------------------------------------------------------

    def observe_step(self, seconds: float, audio_seconds: float, num_streams: int,
                     num_behind: int) -> None:
        """One engine step: how long it took, the audio it made, how many streams had work
        in it, and how many listeners fell behind in it (ran out of audio; the engine does
        not count again those still behind from an earlier step: `_count_behind`)."""
        if seconds <= 0 or num_streams <= 0 or not self.is_learning:
            return
        window = self._window
        window.busy += seconds
        window.audio += audio_seconds
        window.stream_seconds += num_streams * seconds
        window.behind = window.behind or num_behind > 0
        if (window.audio >= MIN_WINDOW_AUDIO_SECONDS
                and window.busy >= MIN_WINDOW_BUSY_SECONDS):
            self._close_window(window)
            self._window = _Window()

    def observe_first_audio(self, other_streams: int, seconds: float) -> None:
        """A request's first audio came `seconds` after its caller handed it in, and
        `other_streams` other streams were in the engine meanwhile (running when it came,
        or coming before its first audio)."""
        if not seconds > 0 or not math.isfinite(seconds) or not self.is_learning:
            return
        self._first_audios += 1
        seen = self._ttfa.setdefault(min(max(0, other_streams), MAX_TTFA_LOAD), _FirstAudios())
        seen.samples.append(seconds)
        seen.last_seen = self._first_audios
        self._forget_unvisited_loads()
        self._publish_ttfa()

    def _publish_ttfa(self) -> None:
        """The TTFA_QUANTILE of each load with MIN_TTFA_SAMPLES first audios and the line
        through them, published whole; the TTFA cap follows."""
        points = {load: (quantile(seen.samples, TTFA_QUANTILE), len(seen.samples))
                  for load, seen in sorted(self._ttfa.items())
                  if len(seen.samples) >= MIN_TTFA_SAMPLES}
        self._ttfa_view = (self._fit_ttfa_line(points),
                           {load: p90 for load, (p90, _) in points.items()},
                           self.idle_ttfa() if 0 in points else None)
        self._ttfa_capacity = self._ttfa_fit_capacity()

    def _forget_unvisited_loads(self) -> None:
        """A load not seen for TTFA_FORGET_FIRST_AUDIOS first audios loses its oldest
        sample at each first audio since: a cap that keeps the engine below a load would
        otherwise keep what that load once cost for ever (one noisy minute would cap a
        server for good); once too few are left, the load is tried again."""
        for load, seen in list(self._ttfa.items()):
            if self._first_audios - seen.last_seen > TTFA_FORGET_FIRST_AUDIOS:
                seen.samples.popleft()
                if not seen.samples:
                    del self._ttfa[load]

    def _close_window(self, window: _Window) -> None:
        streams = window.mean_streams
        features = (window.audio / streams / window.busy, window.audio / window.busy)
        for i in range(2):
            self._sxy[i] = FADING * self._sxy[i] + features[i]
            for j in range(2):
                self._sxx[i][j] = FADING * self._sxx[i][j] + features[i] * features[j]
        self._num_windows = FADING * self._num_windows + 1.0
        seen = math.floor(streams + 0.5)
        for counts in self._windows_at.values():
            counts[0] *= FADING
            counts[1] *= FADING
        self._windows_at.setdefault(seen, [0.0, 0.0])[1 if window.behind else 0] += 1.0
        # NOTE: a window behind where most recent windows with as many streams or more kept
        # up is a hiccup: it neither caps the prediction nor counts as kept up.
        if window.behind and self._behind_share(seen) >= BEHIND_SHARE:
            self.fewest_behind = seen if self.fewest_behind is None else min(self.fewest_behind,
                                                                             seen)
            # what kept up before (a calibration on an idle machine) does not any more
            self.most_kept_up = min(self.most_kept_up, self.fewest_behind - 1)
            self._windows_since_behind = 0
        elif not window.behind:
            self.most_kept_up = max(self.most_kept_up, seen)
            self._windows_since_behind += 1
            if (self.fewest_behind is not None and self._windows_since_behind >= FORGET_WINDOWS
                    and self.demand(self.fewest_behind) * (1 + self.margin) <= 1):
                # NOTE: one more stream is tried, and only when the engine's time allows
                # it: a machine that has become less busy is found a stream at a time.
                self.fewest_behind += 1
                self._windows_since_behind = 0
        self._fit()

    def _behind_share(self, num_streams: int) -> float:
        """Share of the recent windows with `num_streams` streams or more that fell behind."""
        kept = behind = 0.0
        for streams, (kept_at, behind_at) in self._windows_at.items():
            if streams >= num_streams:
                kept, behind = kept + kept_at, behind + behind_at
        return behind / (kept + behind) if kept + behind > 0 else 0.0

    def _fit(self) -> None:
        """Least squares with both terms >= 0; with one N only (no spread to tell the two
        apart), all of the cost is put per stream, which overstates it: cautious."""
        (s11, s12), (_, s22) = self._sxx
        y1, y2 = self._sxy
        determinant = s11 * s22 - s12 * s12
        if determinant > 1e-6 * s11 * s22:
            fixed = (y1 * s22 - y2 * s12) / determinant
            per_stream = (s11 * y2 - s12 * y1) / determinant
            if fixed >= 0 and per_stream > 0:
                self.fixed, self.per_stream = fixed, per_stream
                return
        self.fixed, self.per_stream = 0.0, (y2 / s22 if s22 > 0 else 0.0)

    # --- predicting -----------------------------------------------------------------------

    @property
    def is_fitted(self) -> bool:
        return self._num_windows >= MIN_WINDOWS * 0.9 and self.per_stream > 0

    def demand(self, num_streams: float) -> float:
        """Predicted engine seconds per wall second with `num_streams` playing."""
        return self.fixed + self.per_stream * num_streams

    @property
    def margin(self) -> float:
        """Share of the engine's time kept free: SPREAD_SIGMAS x the windows' relative
        spread around the fit (the root mean square of their relative errors)."""
        if self._num_windows < MIN_WINDOWS * 0.9:
            return max(MIN_MARGIN, COLD_MARGIN)
        a, b = self.fixed, self.per_stream
        (s11, s12), (_, s22) = self._sxx
        y1, y2 = self._sxy
        squared_errors = (self._num_windows - 2 * (a * y1 + b * y2)
                          + a * a * s11 + 2 * a * b * s12 + b * b * s22)
        spread = math.sqrt(max(0.0, squared_errors) / self._num_windows)
        return max(MIN_MARGIN, SPREAD_SIGMAS * spread)

    def ttfa_line(self) -> tuple[float, float] | None:
        """(idle, per other stream): the TTFA p90 a new stream hears is idle +
        per_other_stream x the other streams it shares the engine with (as last
        published; see `_fit_ttfa_line`)."""
        return self._ttfa_view[0]

    def _fit_ttfa_line(self, counted: dict[int, tuple[float, int]]
                       ) -> tuple[float, float] | None:
        """The line through the counted loads' (p90, samples), each weighted by its
        samples; None with fewer than two. Idle is `idle_ttfa` where enough requests had
        the engine to themselves, else the line's intercept."""
        if len(counted) < 2:
            return None
        points = [(float(load), p90, float(count)) for load, (p90, count) in counted.items()]
        if 0 in counted:
            # NOTE: the line starts at what callers alone in the engine heard and
            # rises through the loaded points (least squares through a fixed intercept)
            idle = self.idle_ttfa()
            slope = (sum(w * x * (y - idle) for x, y, w in points)
                     / sum(w * x * x for x, _, w in points))
            return idle, slope
        total = sum(w for _, _, w in points)
        mean_x = sum(x * w for x, _, w in points) / total
        mean_y = sum(y * w for _, y, w in points) / total
        slope = (sum(w * (x - mean_x) * (y - mean_y) for x, y, w in points)
                 / sum(w * (x - mean_x) ** 2 for x, _, w in points))
        idle = mean_y - slope * mean_x
        return (idle, slope) if idle > 0 else None  # a line that says nothing sensible

    def idle_ttfa(self) -> float:
        """The median first audio of the requests alone in the engine. NOTE: the median,
        not the p90: an idle server's first audio barely spreads (its p90 is within a few
        ms of its median); the tail of those alone under load is the machine's other work
        (HTTP refusals, a client on the same cores), which turning streams away does not
        shorten, and taking it as idle would loosen the target by as much."""
        return quantile(self._ttfa[0].samples, 0.5)

    def ttfa_target(self, idle: float) -> float:
        """The first audio a new stream should hear within, given an idle engine's."""
        return max(TTFA_FACTOR * idle, self.ttfa_floor)

    def set_ttfa_floor(self, seconds: float) -> None:
        """Keep first audio within TTFA_FACTOR x idle or `seconds`, whichever is longer
        (0: within TTFA_FACTOR x idle alone); the TTFA cap follows at once."""
        if seconds < 0:
            raise ValueError(f"the TTFA floor must be >= 0 s, got {seconds}")
        self.ttfa_floor = seconds
        self._ttfa_capacity = self._ttfa_fit_capacity()

    def predicted_ttfa(self, other_streams: int) -> float | None:
        """The TTFA p90 a request hears that shares the engine with `other_streams`: the
        p90 measured at that load where it has MIN_TTFA_SAMPLES first audios, else the
        line's; None while the line is unknown."""
        line, counted, _ = self._ttfa_view
        return None if line is None else _predicted_ttfa(other_streams, line, counted)

    def wait_budget(self, num_streams: int) -> float | None:
        """Seconds a request may wait for a turn among `num_streams` streams and still
        hear its first audio within the TTFA target: it starts as one of them ends, with
        the other `num_streams - 1` running. None while neither the TTFA line nor that
        load's measured p90 is known.

        NOTE: without a line the load asked about may still have been measured: a server
        that has held one stream has only lone callers' first audios (no line through one
        load), and a caller queued behind that stream starts alone. Without a budget
        there, only `--max-wait` bounded its wait: `pocket/english` held to 1 stream
        queued callers for 0.1-0.5 s, first audio p90 300 ms against 2x idle's 140."""
        line, counted, idle = self._ttfa_view
        others = num_streams - 1
        if line is not None:
            predicted, idle = _predicted_ttfa(others, line, counted), line[0]
        elif others in counted and idle is not None:
            predicted = counted[others]
        else:
            return None
        return max(0.0, self.ttfa_target(idle) - predicted)

    def _ttfa_fit_capacity(self) -> int | None:
        """Most streams at which a new one's first audio still comes within TTFA_FACTOR
        times an idle engine's (or the floor): the fewest other streams at which the p90
        measured (or, beyond the loads seen, the line) exceeds that, at least 1; None
        when the recent requests do not tell (all at one load, or TTFA not growing)."""
        line, counted, _ = self._ttfa_view
        if line is None:
            return None
        idle, per_other_stream = line
        target = self.ttfa_target(idle)
        # NOTE: measured loads are checked one by one (a step-shaped rise, e.g. the first
        # other stream costing a whole step's wait and more costing little, fits no line)
        for load in range(max(counted) + 1):
            if _predicted_ttfa(load, line, counted) > target:
                return max(1, load)
        if per_other_stream <= 0:
            return None
        beyond = math.floor(max(0.0, target - idle) / per_other_stream + 1e-9) + 1
        return max(max(counted) + 1, beyond)

    def capacity(self) -> int:
        """Streams the engine is predicted to sustain in real time (at least 1): what its
        time allows, but no more than a little over what it was seen to keep up with, and
        fewer than it was seen to fall behind with (a busy step can leave thin buffers dry
        long before the engine's time runs out)."""
        if not self.is_fitted:
            predicted = self.most_kept_up + 1
        else:
            budget = 1.0 / (1.0 + self.margin)
            predicted = min(math.floor((budget - self.fixed) / self.per_stream),
                            self.most_kept_up + max(1, math.ceil(EXPLORE_SHARE
                                                                 * self.most_kept_up)))
        if self.fewest_behind is not None:
            predicted = min(predicted, self.fewest_behind - 1)
        if self._ttfa_capacity is not None:
            predicted = min(predicted, self._ttfa_capacity)
        return max(1, predicted)

    # --- saving -----------------------------------------------------------------------------

    def state(self) -> dict[str, object]:
        """What the model learned, as plain JSON-able values."""
        return {"sxx": self._sxx, "sxy": self._sxy, "num_windows": self._num_windows,
                "most_kept_up": self.most_kept_up, "fewest_behind": self.fewest_behind,
                # NOTE: dict() and list() copy in one go; the server saves from another
                # thread than the engine's, which may add a load meanwhile
                "ttfa_samples": {str(n): list(seen.samples)
                                 for n, seen in dict(self._ttfa).items()},
                "windows_at": {str(n): list(counts)
                               for n, counts in dict(self._windows_at).items()}}

    def restore(self, state: dict[str, object]) -> None:
        """Start from a saved `state()`; ValueError when it is not one."""
        try:
            sxx = [[float(v) for v in row] for row in state["sxx"]]  # type: ignore[attr-defined]
            sxy = [float(v) for v in state["sxy"]]  # type: ignore[attr-defined]
            num_windows = float(state["num_windows"])  # type: ignore[arg-type]
            most_kept_up = int(state["most_kept_up"])  # type: ignore[call-overload]
            # absent in older files (which kept a mean line: relearned from serving)
            ttfa = {int(n): [float(v) for v in samples]
                    for n, samples in dict(state.get("ttfa_samples") or {}).items()}
            behind = state.get("fewest_behind")
            fewest_behind = None if behind is None else int(behind)  # type: ignore[call-overload]
            windows_at = {int(n): [float(kept), float(fell)]  # absent in older files
                          for n, (kept, fell) in dict(state.get("windows_at") or {}).items()}
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"not a saved load model: {error}") from None
        if len(sxx) != 2 or any(len(row) != 2 for row in sxx) or len(sxy) != 2 \
                or not all(map(math.isfinite, [*sxy, num_windows])) \
                or not all(0 <= n <= MAX_TTFA_LOAD and all(map(math.isfinite, samples))
                           for n, samples in ttfa.items()):
            raise ValueError("not a saved load model: wrong shapes or values")
        self._sxx, self._sxy, self._num_windows = sxx, sxy, num_windows
        self.most_kept_up = max(0, most_kept_up)
        self.fewest_behind = None if fewest_behind is None else max(1, fewest_behind)
        self._ttfa = {n: _FirstAudios(deque(kept, maxlen=TTFA_SAMPLES_PER_LOAD))
                      for n, samples in ttfa.items() if (kept := [v for v in samples if v > 0])}
        self._first_audios = 0
        self._publish_ttfa()
        self._windows_at = {n: counts for n, counts in windows_at.items()
                            if n >= 0 and all(map(math.isfinite, counts))}
        self._fit()


def quantile(values: Iterable[float], q: float) -> float:
    """The `q` quantile of `values` (linear between order statistics, as numpy's default)."""
    ordered = sorted(values)
    place = q * (len(ordered) - 1)
    below = math.floor(place)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (place - below)


def _predicted_ttfa(other_streams: int, line: tuple[float, float],
                    counted: dict[int, float]) -> float:
    """The TTFA p90 measured with `other_streams` where counted, else the line's."""
    load = min(max(0, other_streams), MAX_TTFA_LOAD)
    if load in counted:
        return counted[load]
    idle, per_other_stream = line
    return idle + max(0.0, per_other_stream) * max(0, other_streams)
