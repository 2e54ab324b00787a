"""Per (group, GPU) accumulation of window aggregates: energy from the counter, busy time, DRAM, pipe cycles.

Energy (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, mJ since boot) is exact between two samples of the same
series: the increment of window k is ``last_k − last_{k−1}``, which also bridges windows without samples (a gap
in scraping loses no energy while the counter keeps counting). A reset (driver reload, reboot: ``resets() > 0``
or a value below the previous one) breaks that: with one reset in the window the counter still gives the part
before it (``max − last_{k−1}``) and after it (``last − min``), and one scrape interval of power bridges the
reset; otherwise the window's energy comes from the power gauge (mean power × the time the window stands for)
and the reset is counted. The first and last sample of a series stand for half a step each beyond them (the
scrape that first saw a job is on average half a step after it started). Without the counter, all energy comes
from power.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from flopwatch.fleet.reader import WindowBlock
from flopwatch.telemetry import dcgm_metrics as M

#: A window with samples on both sides stands for the whole window (missed scrapes bridged) only if at least
#: this share of its scrapes arrived; otherwise the series may have left and come back inside it (a GPU idle
#: between two jobs), and the window stands for its samples only.
FULL_WINDOW = 0.8


@dataclass
class GpuJob:
    """What one GPU did for one group (job, pod, namespace …) in the range."""

    group: str
    gpu: str
    labels: dict[str, str]  # identifying labels of the GPU (UUID, Hostname, gpu, modelName)
    energy_j: float = 0.0
    energy_from_power_j: float = 0.0  # part of energy_j that came from the power gauge
    covered_s: float = 0.0  # time with samples (n_samples × step)
    duration_s: float = 0.0  # time the samples stand for (missed scrapes bridged, half a step at each end)
    t_first: float = math.inf
    t_last: float = -math.inf
    busy_s: float = 0.0  # ∫ GR_ENGINE_ACTIVE (or GPU_UTIL) dt
    busy_covered_s: float = 0.0
    sm_active_s: float = 0.0
    dram_active_s: float = 0.0  # ∫ DRAM_ACTIVE dt
    dram_covered_s: float = 0.0
    clock_mhz_s: float = 0.0
    clock_covered_s: float = 0.0
    tensor_af: float = 0.0  # ∫ activity × clock dt  (ratio · MHz · s)
    tensor_a: float = 0.0  # ∫ activity dt  (ratio · s), when the clock is missing
    tensor_covered_s: float = 0.0
    fp32_af: float = 0.0
    fp32_a: float = 0.0
    fp32_covered_s: float = 0.0
    other_pipes_s: dict[str, float] = field(default_factory=dict)  # imma/dfma/fp16/fp64 ∫ activity dt
    power_limit_w: float = math.nan
    resets: int = 0
    counter_s: float = 0.0  # covered time whose energy came from the counter
    n_series: int = 0

    @property
    def span_s(self) -> float:
        return max(0.0, self.t_last - self.t_first)


def _f(a: list[list[float]] | None, i: int, k: int) -> float:
    if a is None:
        return math.nan
    return a[i][k]


@dataclass
class _SeriesState:
    job: GpuJob
    last_e: float = math.nan  # J, last counter value seen
    last_p: float = math.nan  # W, mean power of the last window with samples
    counted: bool = False  # some energy came from the counter (so the end edge applies)
    prev_k: int = -(10**9)  # index of the last window with samples
    # the last window with samples, waiting to learn whether the series continues into the next one:
    # (window end time, samples, mean power, energy from power?, previous window had samples?)
    pending: tuple[float, float, float, bool, bool] | None = None
    interior_n: float = 0.0  # samples in windows with samples on both sides (for the missed-scrape rate)
    interior_w: int = 0
    edges: list[tuple[float, float, float, bool, bool, bool]] = field(default_factory=list)


class Accumulator:
    """Folds :class:`WindowBlock` s into :class:`GpuJob` s keyed by (group, GPU); state stays per series."""

    def __init__(self, by_labels: tuple[str, ...], step_s: float, window_s: float) -> None:
        self.by_labels = by_labels
        self.step_s = float(step_s)
        self.window_s = float(window_s)
        self.jobs: dict[tuple[str, str], GpuJob] = {}
        self.unattributed_j = 0.0  # energy of series without the group label (unallocated GPUs)
        self.unattributed_series: set[tuple[tuple[str, str], ...]] = set()
        self._series: dict[tuple[tuple[str, str], ...], _SeriesState] = {}
        self._gpu_n: dict[tuple[str, int], float] = {}  # (GPU, window) → samples over all its series
        self._last_k = -(10**9)

    def add(self, block: WindowBlock) -> None:
        # nested lists: indexing them is several times cheaper than numpy scalar access in this per-window loop
        v: dict[str, list[list[float]]] = {name: a.tolist() for name, a in block.values.items()}
        get = v.get
        tl: list[float] = block.t.tolist()
        step = self.step_s
        for i, labels in enumerate(block.labels):
            key = M.group_key(labels, self.by_labels)
            gid = M.gpu_id(labels)
            if key is None:
                self._unattributed(block, i, labels)
                continue
            skey = tuple(sorted(labels.items()))
            st = self._series.get(skey)
            if st is None:
                job = self.jobs.get((key, gid))
                if job is None:
                    ident = {
                        k: labels[k]
                        for k in ("UUID", "Hostname", "gpu", "modelName", "instance")
                        if k in labels
                    }
                    job = self.jobs[(key, gid)] = GpuJob(group=key, gpu=gid, labels=ident)
                job.n_series += 1
                st = self._series[skey] = _SeriesState(job)
            job = st.job
            pn_, en_ = v.get("p_n"), v.get("e_n")
            self._count_gpu(block, i, labels, pn_ if pn_ is not None else en_)
            for k in range(len(tl)):
                e_n = _f(get("e_n"), i, k)
                p_n = _f(get("p_n"), i, k)
                n = max(e_n if e_n == e_n else 0.0, p_n if p_n == p_n else 0.0)
                if n <= 0:
                    continue
                dt = n * step
                p_avg = _f(get("p_sum"), i, k) / p_n if p_n == p_n and p_n > 0 else math.nan
                ka = int(round(tl[k] / self.window_s))
                cont = st.prev_k == ka - 1
                if st.pending is not None:
                    self._settle(st, next_present=cont)
                use_power = self._energy(st, get, i, k, e_n, p_avg)
                st.pending = (tl[k], n, p_avg, use_power, cont)
                st.prev_k = ka
                job.covered_s += dt
                if p_avg == p_avg:
                    st.last_p = p_avg
                gr_n, gu_n = _f(get("gr_n"), i, k), _f(get("gpu_util_n"), i, k)
                if gr_n == gr_n and gr_n > 0:
                    job.busy_s += _f(get("gr_sum"), i, k) * step
                    job.busy_covered_s += gr_n * step
                elif gu_n == gu_n and gu_n > 0:
                    job.busy_s += _f(get("gpu_util_sum"), i, k) / 100.0 * step
                    job.busy_covered_s += gu_n * step
                sm_n = _f(get("sm_n"), i, k)
                if sm_n == sm_n and sm_n > 0:
                    job.sm_active_s += _f(get("sm_sum"), i, k) * step
                d_n = _f(get("dram_n"), i, k)
                if d_n == d_n and d_n > 0:
                    job.dram_active_s += _f(get("dram_sum"), i, k) * step
                    job.dram_covered_s += d_n * step
                c_n = _f(get("clock_n"), i, k)
                if c_n == c_n and c_n > 0:
                    job.clock_mhz_s += _f(get("clock_sum"), i, k) * step
                    job.clock_covered_s += c_n * step
                for pipe in ("tensor", "fp32"):
                    pn = _f(get(f"{pipe}_n"), i, k)
                    if not (pn == pn and pn > 0):
                        continue
                    setattr(job, f"{pipe}_a", getattr(job, f"{pipe}_a") + _f(get(f"{pipe}_sum"), i, k) * step)
                    setattr(job, f"{pipe}_covered_s", getattr(job, f"{pipe}_covered_s") + pn * step)
                    af = _f(get(f"{pipe}_af"), i, k)  # Σ a·f per sample (exact_clock)
                    if af != af and c_n == c_n and c_n > 0:  # else Σa × the window's mean clock
                        af = _f(get(f"{pipe}_sum"), i, k) * _f(get("clock_sum"), i, k) / c_n
                    if af == af:
                        setattr(job, f"{pipe}_af", getattr(job, f"{pipe}_af") + af * step)
                for other in ("imma", "dfma", "fp16", "fp64"):
                    on = _f(get(f"{other}_n"), i, k)
                    if on == on and on > 0:
                        job.other_pipes_s[other] = (
                            job.other_pipes_s.get(other, 0.0) + _f(get(f"{other}_sum"), i, k) * step
                        )
                pl = _f(get("plimit"), i, k)
                if pl == pl:
                    job.power_limit_w = (
                        pl if job.power_limit_w != job.power_limit_w else max(job.power_limit_w, pl)
                    )

    def _energy(
        self,
        st: _SeriesState,
        g: Callable[[str], list[list[float]] | None],
        i: int,
        k: int,
        e_n: float,
        p_avg: float,
    ) -> bool:
        """Counter energy of window k (added now); True when the window's energy must come from power instead
        (added by :meth:`_settle` once the time it stands for is known)."""
        step = self.step_s
        job = st.job
        if e_n == e_n and e_n > 0:
            last = _f(g("e_last"), i, k) / 1000.0  # mJ → J
            lo = _f(g("e_first"), i, k) / 1000.0
            resets = _f(g("e_resets"), i, k)
            prev = st.last_e
            st.last_e = last
            if (resets == resets and resets > 0) or (prev == prev and lo < prev):
                job.resets += int(resets) if resets == resets and resets > 0 else 1
                hi = _f(g("e_max"), i, k) / 1000.0
                if resets == 1 and prev == prev and hi >= prev and p_avg == p_avg:
                    # before the reset: prev → max; after it: min → last; across it: one interval of power
                    job.energy_j += (hi - prev) + (last - lo) + p_avg * step
                    job.counter_s += e_n * step
                    st.counted = True
                    return False
                return True
            if prev == prev:  # bridges windows and missed scrapes: the counter kept counting
                de = last - prev
            else:  # the first samples of this series: start edge of half a step
                de = (last - lo) + (0.5 * step * p_avg if p_avg == p_avg else 0.0)
            job.energy_j += de
            job.counter_s += e_n * step
            st.counted = True
            return False
        return p_avg == p_avg

    def _settle(self, st: _SeriesState, *, next_present: bool) -> None:
        """Close the pending window: the time it stands for and its power energy.

        A window with samples before and after it and at least :data:`FULL_WINDOW` of its scrapes stands for the
        whole window (missed scrapes bridged). Any other (an edge
        window: a series starts or ends in it) stands for its samples × step, corrected for the series' rate of
        missed scrapes in its interior windows, and is placed against the neighbouring window; it is settled in
        :meth:`finish`, when that rate is known. A series that lives inside one window is placed at its middle
        (its start and end are then known to ± half a window).
        """
        assert st.pending is not None
        t_end, n, p_avg, use_power, prev_present = st.pending
        st.pending = None
        if prev_present and next_present and n >= FULL_WINDOW * self.window_s / self.step_s:
            st.interior_n += n
            st.interior_w += 1
            self._add_span(st, self.window_s, p_avg, use_power)
        else:
            st.edges.append((t_end, n, p_avg, use_power, prev_present, next_present))

    def _add_span(self, st: _SeriesState, span: float, p_avg: float, use_power: bool) -> None:
        job = st.job
        job.duration_s += span
        if use_power and p_avg == p_avg:
            job.energy_j += p_avg * span
            job.energy_from_power_j += p_avg * span

    def _settle_edges(self, st: _SeriesState, fleet_kept: float) -> None:
        W, step = self.window_s, self.step_s
        kept = st.interior_n * step / (st.interior_w * W) if st.interior_w else fleet_kept
        kept = min(
            max(kept, 0.5), 1.0
        )  # share of scrapes that arrived (missed ones are bridged in the interior)
        job = st.job
        for t_end, n, p_avg, use_power, prev_present, next_present in st.edges:
            span = min(W, n * step / kept)
            if not prev_present:
                start = t_end - span if next_present else t_end - W / 2 - span / 2
                job.t_first = min(job.t_first, start)
            if not next_present:
                end = t_end - W + span if prev_present else t_end - W / 2 + span / 2
                job.t_last = max(job.t_last, end)
            self._add_span(st, span, p_avg, use_power)
        st.edges = []

    def _unattributed(self, block: WindowBlock, i: int, labels: Mapping[str, str]) -> None:
        key = tuple(sorted(labels.items()))
        self.unattributed_series.add(key)
        ps, pn, en = block.values.get("p_sum"), block.values.get("p_n"), block.values.get("e_n")
        if ps is not None and pn is not None:
            self.unattributed_j += float(np.nansum(ps[i])) * self.step_s
        self._count_gpu(block, i, labels, pn if pn is not None else en)

    def _count_gpu(
        self,
        block: WindowBlock,
        i: int,
        labels: Mapping[str, str],
        counts: np.ndarray | list[list[float]] | None,
    ) -> None:
        if counts is None:
            return
        gid = M.gpu_id(labels)
        for k in range(len(block.t)):
            n = float(counts[i][k])
            if n == n and n > 0:
                ka = int(round(float(block.t[k]) / self.window_s))
                self._gpu_n[(gid, ka)] = self._gpu_n.get((gid, ka), 0.0) + n
                self._last_k = max(self._last_k, ka)

    def finish(self) -> list[GpuJob]:
        """Close every series (end edge of half a step) and return the GPU-jobs."""
        for st in self._series.values():
            if st.pending is not None:
                self._settle(st, next_present=False)
        # a series without interior windows (a job shorter than two windows) borrows the chunk's scrape rate: a
        # GPU is scraped the whole time whichever series (job) it is in, so its samples per window over all its
        # series, over the scrapes a window holds, is the share that arrived (median over GPUs and windows; the
        # last window may be cut by the end of the range)
        full = [n for (_g, k), n in self._gpu_n.items() if k < self._last_k]
        fleet_kept = float(np.median(full)) * self.step_s / self.window_s if full else 1.0
        for st in self._series.values():
            self._settle_edges(st, fleet_kept)
            if st.counted and st.last_p == st.last_p:
                st.job.energy_j += 0.5 * self.step_s * st.last_p
        out = list(self.jobs.values())
        self.jobs, self._series, self._gpu_n = {}, {}, {}
        return out
