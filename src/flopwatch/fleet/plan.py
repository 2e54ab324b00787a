"""What to read and in which pieces: the time range, the window, and chunks that keep every query inside the
engine's limits (the constants below; docs/fleet.md, "How it reads")."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from flopwatch.errors import InputError

#: Prometheus's default ``--query.max-samples`` (Prometheus docs, "Command-line flags"): a range query over ``G``
#: GPUs and ``T`` s at scrape interval ``s`` touches about ``G × series_per_gpu × T / s`` samples (10,000 GPUs ×
#: 30 days at 15 s: 1.7e9 per metric), so the fleet is read in chunks of GPUs and of time.
PROM_MAX_SAMPLES = 50_000_000
#: VictoriaMetrics' default ``-search.maxQueryLen`` (bytes); a chunk's GPU matcher is an alternation of UUIDs.
MAX_QUERY_BYTES = 16_384
#: Prometheus's limit of points per series in one range answer (``exceeded maximum resolution``).
MAX_POINTS_PER_SERIES = 11_000
#: Above this step a range subquery would fall outside Prometheus's default 5 min lookback, and job boundaries
#: blur by more than the scrape intervals dcgm-exporter deployments use (15–60 s).
MAX_STEP_S = 300.0
#: Most windows in one plan: each GPU chunk is folded as (series × window) arrays (a year of 1 h windows is 8,760).
MAX_WINDOWS = 10_000
#: Bytes of the longest query expression around the GPU alternation (metric name, function, range, other matchers).
QUERY_OVERHEAD_BYTES = 400


@dataclass(frozen=True)
class ReadPlan:
    """What to read: time range, resolution, chunk limits."""

    start: float
    end: float
    step_s: float = 15.0  # the scrape interval of the dcgm-exporter job
    window_s: float = 3600.0  # Prometheus-side aggregation window
    matchers: str = ""  # label matchers of --selector, without braces
    concurrency: int = 4  # queries in flight at once (Prometheus evaluates them in parallel)
    #: Samples one query may touch: a quarter of Prometheus's default limit (the engine also holds the answer).
    max_samples: int = PROM_MAX_SAMPLES // 4
    max_query_bytes: int = MAX_QUERY_BYTES
    #: Series per GPU within one time chunk assumed by the sample budget (one per job that held the GPU).
    series_per_gpu: int = 8
    gpus_per_chunk: int | None = None  # None: the largest the limits allow (at most 256)
    time_chunk_s: float | None = None  # None: the longest the limits allow

    def check(self) -> ReadPlan:
        nums = {"start": self.start, "end": self.end, "step": self.step_s, "window": self.window_s}
        for k, v in nums.items():
            if not math.isfinite(v):
                raise InputError(f"must be finite, got {v!r}", field=k)
        if not self.end > self.start:
            raise InputError(f"end ({self.end:.0f}) must be after start ({self.start:.0f})", field="end")
        if not 0 < self.step_s <= MAX_STEP_S:
            raise InputError(f"step {self.step_s:g} s is too coarse or not positive: must be in (0, {MAX_STEP_S:g}] s (the scrape interval, "
                             "typically 15–60 s)", field="step")  # fmt: skip
        if self.step_s > (self.end - self.start) / 2:
            raise InputError(f"step {self.step_s:g} s is too coarse for a {self.end - self.start:g} s range (fewer than two "
                             "samples per series)", field="step")  # fmt: skip
        # one scrape per window: twin series of one GPU on alternate scrapes would look like job changes (round 8)
        if self.window_s < 2 * self.step_s:
            raise InputError("window must hold at least two scrapes (2 × step)", field="window")
        # the reader folds (series × window) arrays; a last window past the end counts what ran after it (round 8)
        if (n := (self.end - self.start) / self.window_s) > MAX_WINDOWS or abs(n - round(n)) > 1e-9 * n:
            raise InputError(f"{n:.6g} windows of {self.window_s:g} s between start and end: must be a whole number, at most "
                             f"{MAX_WINDOWS}: use a longer --window (one that divides the range) or a shorter range", field="window")  # fmt: skip
        if self.gpus_per_chunk is not None and self.gpus_per_chunk < 1:
            raise InputError("must be >= 1", field="gpus_per_chunk")
        if self.time_chunk_s is not None and not (
            math.isfinite(self.time_chunk_s) and self.time_chunk_s >= self.window_s
        ):
            raise InputError("must be at least one window", field="time_chunk")
        return self

    @property
    def n_windows(self) -> int:
        return max(1, math.ceil((self.end - self.start) / self.window_s - 1e-9))

    def window_ends(self) -> list[float]:
        return [self.start + (k + 1) * self.window_s for k in range(self.n_windows)]


@dataclass(frozen=True)
class Chunking:
    """How a fleet is cut: GPUs per chunk and windows per time chunk, with the worst query's size."""

    gpus_per_chunk: int
    windows_per_chunk: int
    samples_per_query: float  # samples one query touches at most (the budget's arithmetic)
    query_bytes: int  # longest query string at most

    def time_chunks(self, plan: ReadPlan) -> list[tuple[float, float]]:
        """[(first window end, last window end)] tiling the plan's windows."""
        ends = plan.window_ends()
        n = self.windows_per_chunk
        return [(ends[i], ends[min(i + n, len(ends)) - 1]) for i in range(0, len(ends), n)]


def chunking(plan: ReadPlan, n_gpus: int, key_bytes: int = 45) -> Chunking:
    """The chunks of a fleet of ``n_gpus`` whose chunk key (UUID) spells in ``key_bytes`` bytes, escaped: as
    many GPUs as the query length allows (at most 256), then as long a time chunk as the sample budget allows.

    Raises when even one GPU over one window exceeds the budget (a scrape interval far below the plan's step)."""
    per_gpu_bytes = key_bytes + 1  # the alternation's "|"
    by_bytes = max(1, (plan.max_query_bytes - QUERY_OVERHEAD_BYTES) // per_gpu_bytes)
    samples_per_window = plan.series_per_gpu * plan.window_s / plan.step_s
    by_samples = int(plan.max_samples // samples_per_window)
    if by_samples < 1:
        raise InputError(f"one GPU over one {plan.window_s:g} s window is {samples_per_window:.3g} samples, over the budget "
                         f"of {plan.max_samples:.3g}: use a shorter --window", field="window")  # fmt: skip
    g = min(n_gpus, by_bytes, 256, by_samples) if plan.gpus_per_chunk is None else plan.gpus_per_chunk
    g = max(1, min(g, by_bytes, by_samples))
    w_max = min(plan.n_windows, MAX_POINTS_PER_SERIES - 1, int(plan.max_samples // (g * samples_per_window)))
    if plan.time_chunk_s is not None:
        w_max = min(w_max, max(1, int(plan.time_chunk_s // plan.window_s)))
    w = max(1, w_max)
    return Chunking(
        gpus_per_chunk=g,
        windows_per_chunk=w,
        samples_per_query=g * w * samples_per_window,
        query_bytes=QUERY_OVERHEAD_BYTES + g * per_gpu_bytes,
    )


def range_str(seconds: float, closed: bool) -> str:
    """A PromQL range of ``seconds``, one millisecond shorter where ranges include both ends (Prometheus 2.x; 3.x
    only the right one), so that windows tile time without counting a sample twice (timestamps are whole ms)."""
    ms = int(round(seconds * 1000))
    return f"{ms - 1 if closed else ms}ms"


#: RE2 metacharacters: each escaped with a backslash (itself escaped for the PromQL string).
_RE_META = re.compile(r"([.^$*+?()\[\]{}|\\])")


def re_escape(v: str) -> str:
    """``v`` as a literal in a PromQL regex string: RE2 metacharacters escaped, then spelled as JSON (r. 12, uuid-control)."""
    return json.dumps(_RE_META.sub(r"\\\1", v), ensure_ascii=False)[1:-1]


def gpu_matchers(plan: ReadPlan, label: str, keys: list[str]) -> str:
    """The plan's matchers plus ``label`` matching any of ``keys`` (none: the plan's matchers)."""
    if not label:
        return plan.matchers
    mm = f'{label}=~"{"|".join(re_escape(k) for k in keys)}"'
    return f"{plan.matchers},{mm}" if plan.matchers else mm
