"""Span resolution: per-(GPU, job) totals over the whole range, computed by Prometheus (``--resolution span``).

The window reader (:mod:`.reader`) brings back one number per series, window and query (24 per GPU-day at the
default 1 h window) and folds them in Python. What the estimators use is a total over each series' life: energy,
Σ activity, Σ clock, sample counts. This reader asks Prometheus for those totals directly: one instant query per
metric, evaluated once over the range (``sum_over_time(G[R])``, ``max_over_time(E[R])`` …), so the answer is one number
per series and metric, and Prometheus evaluates each series once instead of once per window. Series are summed
``by`` the labels that identify a GPU and a job (:data:`ID_LABELS`): the rest (driver version, device name, PCI
bus, scrape job) only make the answer bigger.

Only the sample counts are read per window (one range query). They place each series' start and end and bridge
missed scrapes exactly as the window reader does (the same :class:`~.aggregate.Accumulator` code), so durations,
spans, GPU-hours and coverage are the window reader's.

What differs from window resolution (``benchmarks/bench_fleet.py --resolution both`` measures it):

* **Energy edges.** A series' counter difference (``max − min``) is extended by one step in all, ``Δ · n/(n − 1)``
  for ``n`` samples (raw or rule series alike), instead of half a step of the first and the last window's mean
  power: the two differ by half a step times the difference between the edge and the mean power. A series with
  one sample in the range gets its step from its power, as at window resolution. With the counter's rise rule the
  difference is the rise summed over the range; for a series the range start cuts, the first window's rise reaches
  back to the last sample before the range, and that step stands for the extension.
* **Pipe clock weighting.** With the job-level rules, per window as at window resolution; otherwise Σ activity ×
  the series' mean SM clock over its life: differs when the clock moves between windows of one job (power
  capping, thermal throttling).
* **Counter resets and gaps.** GPUs whose energy counter reset inside the range, or with a job series that has an
  empty window between its first and last, are read again at window resolution (exact as that reader is; both are
  rare: driver reloads, a job leaving a GPU and coming back), so neither is handled differently.
* **GPUs between jobs** (series without the group label): Σ power × step, as at window resolution, from one
  fleet-wide query (their counter's difference would hold the energy of the jobs that ran in between).

Raw series: Prometheus still reads every sample once per metric. With flopwatch's recording rules
(:mod:`.rules`) it reads one rule sample per series and window.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from flopwatch.fleet.aggregate import Accumulator, GpuJob
from flopwatch.fleet.joblevel import JobLevel, JobPipes
from flopwatch.fleet.reader import FleetReader, _ms_range, _re_escape
from flopwatch.telemetry import dcgm_metrics as M
from flopwatch.telemetry.prom_client import Series
from flopwatch.telemetry.prom_client import VectorAnswer as Answer

#: Labels kept per series: what identifies a physical GPU (:func:`~flopwatch.telemetry.dcgm_metrics.gpu_id`), its
#: model, and a job (every group label :data:`~flopwatch.telemetry.dcgm_metrics.GROUP_LABELS` knows); ``--by LABEL``
#: adds its own. Series that differ only in other labels (``container``, driver version …) are summed into one, as
#: the window reader sums them into one GPU-job.
ID_LABELS: tuple[str, ...] = (
    "UUID",
    "Hostname",
    "instance",
    "exported_instance",
    "gpu",
    "modelName",
    "pod",
    "namespace",
    "exported_pod",
    "exported_namespace",
    "hpc_job",
)

#: Gauges summed over each series' life: query key → metric (the tensor pipe is HMMA where present).
_GAUGES = ("gr", "gpu_util", "sm", "dram", "clock", "tensor", "fp32", "imma", "dfma", "fp16", "fp64")
#: Per-GPU gauges the job-level rules replace (with the power limit).
JOB_GAUGES = frozenset({"sm", "clock", "tensor", "fp32", "imma", "dfma", "fp16", "fp64"})


def _gauge_metrics(present: frozenset[str]) -> dict[str, str]:
    out = {
        "gr": M.GR_ACTIVE,
        "gpu_util": M.GPU_UTIL if M.GR_ACTIVE not in present else "",  # a fallback only
        "sm": M.SM_ACTIVE,
        "dram": M.DRAM,
        "clock": M.SM_CLOCK,
        "tensor": M.HMMA if M.HMMA in present else M.TENSOR,
        "fp32": M.FP32,
        "imma": M.IMMA,
        "dfma": M.DFMA,
        "fp16": M.FP16,
        "fp64": M.FP64,
    }
    return {k: v for k, v in out.items() if v and v in present}


def span_queries(
    present: frozenset[str],
    matchers: str,
    R: str,
    by: str,
    *,
    rules_window_s: float | None = None,
    dram: bool = True,
    job_level: bool = False,
    gpu_level_resets: bool = False,
    rise: str | None = None,
) -> dict[str, str]:
    """Instant queries (evaluated at the end of the range ``R``) of the per-series totals.

    ``rules_window_s``: read flopwatch's recording-rule series of that window instead of the raw samples.
    ``dram``: read DRAM activity (only profile models with a TB term use it: one pass fewer without a profile).
    ``job_level``: the job-level rules (:data:`JOB_GAUGES`, read once per fleet by :meth:`SpanReader.submit_jobs`)
    carry the pipes, clock, SM activity and power limit: per GPU only energy and utilisation (and DRAM).
    ``gpu_level_resets``: the GPU-level rules say which GPUs' counters fell: no per-GPU-job ``last``/``resets``.
    ``rise``: the counter's rise rule, with ``gpu_level_resets``: the counter's energy is its rise summed over the
    range (one per-GPU-job series read instead of two, ``max`` and ``min``): :meth:`SpanReader._fold`.
    """
    sel = (lambda name: f"{name}{{{matchers}}}") if matchers else (lambda name: name)
    gauges = _gauge_metrics(present)
    if not dram:
        gauges.pop("dram", None)
    if job_level:
        gauges = {k: v for k, v in gauges.items() if k not in JOB_GAUGES}
    q: dict[str, str] = {}
    if rules_window_s is not None:
        from flopwatch.fleet.rules import reader_rule

        def rule(name: str) -> str:
            r = reader_rule(name, present, rules_window_s)
            if r is None:  # every name here has a rule (flopwatch.fleet.rules.RULE_QUERIES)
                raise AssertionError(name)
            return sel(r)

        if M.ENERGY in present:
            e_max = f"max by ({by}) (max_over_time({rule('e_max')}[{R}]))"
            e_min = f"min by ({by}) (min_over_time({rule('e_first')}[{R}]))"
            if gpu_level_resets and rise is not None:
                q["e_rise"] = f"sum by ({by}) (sum_over_time({sel(rise)}[{R}]))"
            elif gpu_level_resets:  # only the difference is used: one answer instead of two
                q["e_delta"] = f"{e_max} - {e_min}"
            else:
                q |= {"e_max": e_max, "e_min": e_min}
                q["e_last"] = f"max by ({by}) (last_over_time({rule('e_last')}[{R}]))"
                q["e_resets"] = f"sum by ({by}) (sum_over_time({rule('e_resets')}[{R}]))"
        else:
            q["p_sum"] = f"sum by ({by}) (sum_over_time({rule('p_sum')}[{R}]))"
        for key in gauges:
            q[key] = f"sum by ({by}) (sum_over_time({rule(key + '_avg')}[{R}]))"
        if M.POWER_LIMIT in present and not job_level:
            q["plimit"] = f"max by ({by}) (max_over_time({rule('plimit')}[{R}]))"
        return q
    if M.ENERGY in present:
        # the counter's max − min over the range, extended by one step as on rule series: exact for a series
        # without a reset (resets() sends GPUs that reset back to window resolution). Not increase(): it
        # extrapolates a series cut by the range end to the range boundary (+15 % on a 2-sample job)
        e = sel(M.ENERGY)
        q["e_delta"] = f"max by ({by}) (max_over_time({e}[{R}])) - min by ({by}) (min_over_time({e}[{R}]))"
        q["e_resets"] = f"sum by ({by}) (resets({sel(M.ENERGY)}[{R}]))"
    else:
        q["p_sum"] = f"sum by ({by}) (sum_over_time({sel(M.POWER)}[{R}]))"
    for key, name in gauges.items():
        q[key] = f"sum by ({by}) (sum_over_time({sel(name)}[{R}]))"
    if M.POWER_LIMIT in present:
        q["plimit"] = f"max by ({by}) (max_over_time({sel(M.POWER_LIMIT)}[{R}]))"
    return q


@dataclass
class _Pending:
    """The queries of one GPU chunk in flight."""

    matchers: str
    counts: list[Future[list[Series]]]
    span: dict[str, Future[Answer]]


@dataclass
class SpanChunk:
    """The GPU-jobs of one GPU chunk, and the energy of its series without a group label."""

    jobs: list[GpuJob]
    unattributed_j: float = 0.0
    unattributed_series: set[tuple[tuple[str, str], ...]] = field(default_factory=set)
    regrid_gpus: int = 0  # GPUs read again at window resolution (counter resets, gaps)


class SpanReader:
    """Reads GPU chunks at span resolution through a :class:`~.reader.FleetReader` (plan, rules, client):
    :meth:`submit` sends a chunk's queries to a thread pool, :meth:`collect` folds its answers into GPU-jobs."""

    def __init__(
        self,
        reader: FleetReader,
        by_labels: tuple[str, ...],
        *,
        uuid_keyed: bool = False,
        dram: bool = True,
        job_plan: tuple[dict[str, str], str] | None = None,
    ) -> None:
        """``uuid_keyed``: every series carries ``UUID`` (discovery chunked the fleet by it). The totals are then
        summed by UUID and the job labels only; the sample counts, once per chunk, bring the GPU's other labels
        (model, host): ≈ 40 % fewer bytes in all (benchmarks/bench_fleet.py). ``job_plan``:
        :meth:`~.joblevel.JobLevel.plan_rules`'s answer for this reader's plan, when already asked."""
        self.reader = reader
        self.by_labels = by_labels
        self.ids = tuple(ID_LABELS) + tuple(b for b in by_labels if b not in ID_LABELS)
        self.count_by = ", ".join(self.ids)
        if uuid_keyed:
            self.ids = tuple(k for k in self.ids if k not in ("Hostname", "instance", "gpu", "modelName"))
            self.ids += tuple(b for b in by_labels if b not in self.ids)
        self.by = ", ".join(self.ids)
        self.rules_window = reader.plan.window_s if reader.rules_used else None
        self.dram = dram
        self.jobs = JobLevel(reader, by_labels, plan=self.rules_window is not None, planned=job_plan)
        self.idle_j: dict[tuple[str | None, ...], float] | None = None  # collect_idle
        if uuid_keyed and self.job_level:
            # groups are jobs, not hosts: of the GPU's labels the counts need only its model (the device)
            self.count_by = ", ".join((*self.ids, "modelName"))

    @property
    def job_level(self) -> bool:
        """The job-level rules stand in for the per-GPU pipes, clock, SM activity and power limit."""
        return self.jobs.used

    @property
    def rise_used(self) -> bool:
        """The counter's energy comes from its rise rule (:data:`flopwatch.fleet.rules.SERIES_RULES`)."""
        return "e_rise" in self._queries("x")[0]

    @property
    def job_note(self) -> str:
        return self.jobs.note

    def submit_jobs(self, pool: ThreadPoolExecutor) -> dict[str, Future[Answer]]:
        """Send the job- and GPU-level queries (:class:`~.joblevel.JobLevel`), once per fleet."""
        _q, R, t_end = self._queries("")
        return self.jobs.submit(pool, R, t_end)

    def submit_idle(self, pool: ThreadPoolExecutor) -> Future[Answer] | None:
        """Send the query of the series without a group label (GPUs between jobs), once per fleet: their energy is
        Σ power × step, as at window resolution. (Their counter's max − min would hold the energy of the jobs that
        ran between their windows; on the simulated 1024-GPU day 37 GJ, the whole fleet's, instead of 0.68 GJ.)
        None when there is no power gauge: then their counter's difference stands."""
        present = self.reader.present
        if M.POWER not in present:
            return None
        _q, R, t_end = self._queries("")
        unlabelled = ",".join(f'{b}=""' for b in self.by_labels)
        m = f"{self.reader.plan.matchers},{unlabelled}" if self.reader.plan.matchers else unlabelled
        name = M.POWER
        if self.rules_window is not None:
            from flopwatch.fleet.rules import reader_rule

            name = str(reader_rule("p_sum", present, self.rules_window))
        expr = f"sum by ({self.by}) (sum_over_time({name}{{{m}}}[{R}]))"
        return pool.submit(self.reader.client.query_values, expr, t_end)

    def collect_idle(self, fut: Future[Answer] | None, on_query: Callable[[], None] | None = None) -> None:
        """The idle series' energy (:meth:`submit_idle`), by row key, for :meth:`collect`."""
        if fut is None:
            return
        step = self.reader.plan.step_s
        labs, vals = fut.result()
        self._tick(on_query)
        self.idle_j = {
            self._row_key(lab): float(x) * step for lab, x in zip(labs, vals.tolist(), strict=True)
        }

    @property
    def n_fleet_queries(self) -> int:
        """Queries asked once per fleet: the job- and GPU-level rules', and the idle series' power."""
        return len(self.jobs.rules) - ("e_rise" in self.jobs.rules) + (M.POWER in self.reader.present)

    def collect_jobs(
        self, futs: Mapping[str, Future[Answer]], on_query: Callable[[], None] | None = None
    ) -> dict[str, dict[str, JobPipes]]:
        """group → device model → :class:`~.joblevel.JobPipes`; the GPUs whose counter fell go to
        ``self.jobs.fell_gpus``."""
        return self.jobs.collect(futs, lambda: self._tick(on_query))

    def _queries(self, matchers: str) -> tuple[dict[str, str], str, float]:
        p = self.reader.plan
        t_chunks = self.reader.time_chunks()
        t_end = t_chunks[-1][1]
        closed = self.reader.client.version() < (3, 0)
        R = _ms_range(t_end - p.start, closed)
        q = span_queries(
            self.reader.present,
            matchers,
            R,
            self.by,
            rules_window_s=self.rules_window,
            dram=self.dram,
            job_level=self.job_level,
            gpu_level_resets=self.gpu_level_resets,
            rise=self.jobs.rise,
        )
        return q, R, t_end

    @property
    def n_queries_per_chunk(self) -> int:
        q, _R, _t = self._queries("x")
        return len(q) + len(self.reader.time_chunks())

    @property
    def gpu_level_resets(self) -> bool:
        """The counter's falls come from the GPU-level rules (not per GPU-job ``last`` and ``resets``)."""
        return self.jobs.gpu_resets

    def _count_expr(self, matchers: str, W: str) -> str:
        present = self.reader.present
        # the counter's samples where it exists (energy comes from it), else the power's
        ref = M.ENERGY if M.ENERGY in present else M.POWER
        if self.rules_window is not None:
            from flopwatch.fleet.rules import reader_rule

            rule = reader_rule("p_n" if ref == M.POWER else "e_n", present, self.rules_window)
            inner = (
                f"last_over_time({rule}{{{matchers}}}[{W}])" if matchers else f"last_over_time({rule}[{W}])"
            )
        else:
            inner = (
                f"count_over_time({ref}{{{matchers}}}[{W}])" if matchers else f"count_over_time({ref}[{W}])"
            )
        return f"sum by ({self.count_by}) ({inner})"

    def submit(self, pool: ThreadPoolExecutor, matchers: str) -> _Pending:
        """Send the queries of one GPU chunk (:meth:`collect` gathers them), so that the next chunk's queries run
        on the server while this process folds the previous chunk."""
        reader = self.reader
        p = reader.plan
        closed = reader.client.version() < (3, 0)
        W = _ms_range(p.window_s, closed)
        queries, _R, t_end = self._queries(matchers)
        count_expr = self._count_expr(matchers, W)
        # with the rise rule, the counts of the window before the range too: which series it cut (collect)
        before = p.window_s if "e_rise" in queries else 0.0
        counts = [
            pool.submit(
                reader.client.query_range,
                count_expr,
                t0 + p.window_s - (before if t0 == p.start else 0.0),
                t1,
                p.window_s,
            )
            for t0, t1 in reader.time_chunks()
        ]
        span = {name: pool.submit(reader.client.query_values, expr, t_end) for name, expr in queries.items()}
        return _Pending(matchers, counts, span)

    def collect(self, pending: _Pending, on_query: Callable[[], None] | None = None) -> SpanChunk:
        """The GPU-jobs of one GPU chunk, from its answers."""
        p = self.reader.plan
        key = self._row_key
        # the windows' sample counts: one row per series over the whole range
        index: dict[tuple[str | None, ...], int] = {}
        labels: list[Mapping[str, str]] = []
        parts: list[tuple[list[Series], list[int]]] = []
        for f in pending.counts:
            ss = f.result()
            self._tick(on_query)
            row_of = []
            for s in ss:
                k = key(s.labels)
                i = index.get(k)
                if i is None:
                    i = index[k] = len(labels)
                    labels.append(s.labels)
                row_of.append(i)
            parts.append((ss, row_of))
        t_ends = _window_ends(self.reader)
        n_win = len(t_ends)
        N = np.zeros((len(labels), n_win))
        # samples in the window before the range (asked with the rise rule only)
        before = np.zeros(len(labels))
        for ss, row_of in parts:
            if not ss:
                continue
            rows = np.repeat(np.asarray(row_of, np.intp), [len(s.t) for s in ss])
            tt = np.concatenate([s.t for s in ss])
            vv = np.concatenate([s.v for s in ss])
            j = np.rint((tt - t_ends[0]) / p.window_s).astype(np.intp)
            ok = (j >= 0) & (j < n_win) & np.isfinite(vv)
            np.add.at(N, (rows[ok], j[ok]), vv[ok])  # series that differ only in the GPU's labels: one row
            pre = (j == -1) & np.isfinite(vv)
            np.add.at(before, rows[pre], vv[pre])
        # per-series totals, aligned with the count rows
        v: dict[str, np.ndarray] = {}
        for name, f in pending.span.items():
            labs, vals = f.result()
            self._tick(on_query)
            a = np.full(len(labels), np.nan)
            rows = np.fromiter((index.get(key(lab), -1) for lab in labs), np.intp, len(labs))
            known = rows >= 0
            a[rows[known]] = vals[known]
            v[name] = a
        if "e_rise" in v:
            v["n_before"] = before
        return self._fold(labels, N, t_ends, v, pending.matchers)

    def _row_key(self, labels: Mapping[str, str]) -> tuple[str | None, ...]:
        """Identity of a series across the chunk's answers (each is summed ``by`` the same labels)."""
        return tuple(map(labels.get, self.ids))

    def _tick(self, on_query: Callable[[], None] | None) -> None:
        self.reader.n_queries += 1
        if on_query is not None:
            on_query()

    def _fold(
        self,
        labels: list[Mapping[str, str]],
        N: np.ndarray,
        t_ends: np.ndarray,
        v: Mapping[str, np.ndarray],
        matchers: str,
    ) -> SpanChunk:
        """Per-series totals → GPU-jobs, on arrays (one pass in Python names each row's GPU-job)."""
        p = self.reader.plan
        step = p.step_s
        S = len(labels)
        gids = [M.gpu_id(lab) for lab in labels]
        groups = [M.group_key(lab, self.by_labels) for lab in labels]
        covered, duration, t_first, t_last = place(N, t_ends, gids, step, p.window_s)
        n = N.sum(axis=1)
        nan = np.full(S, np.nan)
        resets = v.get("e_resets", nan).copy()
        if self.gpu_level_resets:  # GPU-level rules: the GPUs whose counter fell anywhere in the range
            resets = np.fromiter((1.0 if g in self.jobs.fell_gpus else 0.0 for g in gids), float, S)
        # series with an empty window between their first and last
        P = N > 0
        gap = P.any(axis=1) & (
            (N.shape[1] - np.argmax(P[:, ::-1], axis=1)) - np.argmax(P, axis=1) > P.sum(axis=1)
        )
        attributed = np.fromiter((g is not None for g in groups), bool, S)
        with np.errstate(invalid="ignore", divide="ignore"):
            if "e_rise" in v:
                # the rise telescopes to last − first over a series' contiguous windows: its max − min, extended by
                # one step as below (n/(n − 1)); for a series the range cut (samples in the window before it and
                # in its first), the first window's rise reaches back to the last sample before the range: that
                # step stands for the extension
                rise = v["e_rise"] / 1000.0
                cut = ((v["n_before"] > 0) & P[:, 0]) if N.shape[1] else np.zeros(S, bool)
                energy = np.where(cut | (n <= 1), rise, rise * n / np.maximum(n - 1, 1))
            elif "e_max" in v or "e_delta" in v:
                delta = (v["e_delta"] if "e_delta" in v else v["e_max"] - v["e_min"]) / 1000.0
                energy = np.where(n > 1, delta * n / np.maximum(n - 1, 1), delta)
                if "e_last" in v:  # the counter fell: a reset between windows (else the GPU-level rules say)
                    resets = np.where(v["e_last"] < v["e_max"], np.fmax(resets, 1.0), resets)
            else:
                energy = nan
            live = n > 0
            # one counter sample has no difference to give: the window reader counts its step from the power
            # (half a step on either side, as every series' edges): so do we, as counter energy (_lazy_power)
            single = live & (n == 1) & (M.POWER in self.reader.present)
            energy = np.where(single, 0.0, energy)
            # GPUs read again per window: a counter that fell; a job's series with an empty window between its first
            # and last (its max − min holds the gap's energy, but its count of samples does not: the n/(n − 1) edge
            # would spread that energy over the scrapes; and the rise rule restarts after a gap)
            regrid = {gids[i] for i in np.flatnonzero(live & ((resets > 0) | (gap & attributed))).tolist()}
        out = SpanChunk(jobs=[])
        # each row's GPU-job (−1: unattributed, or read again per window)
        jobs: list[GpuJob] = []
        job_ix: dict[tuple[str, str], int] = {}
        row_job = np.full(S, -1, dtype=np.intp)
        unattributed_by_gpu: dict[str, float] = {}
        need_power: list[tuple[int, GpuJob | None]] = []
        edges: list[int] = []  # single-sample rows: their step's energy from the power
        for i in np.flatnonzero(live).tolist():
            gid, group = gids[i], groups[i]
            if gid in regrid:
                continue
            if group is None:
                key = self._row_key(labels[i])
                out.unattributed_series.add(key)
                if self.idle_j is not None:  # Σ power × step (submit_idle); a series without power: nothing
                    unattributed_by_gpu[gid] = unattributed_by_gpu.get(gid, 0.0) + self.idle_j.get(key, 0.0)
                    continue
                if single[i]:
                    edges.append(i)
                e = float(energy[i])
                if e == e:
                    unattributed_by_gpu[gid] = unattributed_by_gpu.get(gid, 0.0) + e
                else:
                    need_power.append((i, None))
                continue
            if single[i]:
                edges.append(i)
            j = job_ix.get((group, gid))
            if j is None:
                lab = labels[i]
                ident = {k: lab[k] for k in ("UUID", "Hostname", "gpu", "modelName", "instance") if k in lab}
                j = job_ix[(group, gid)] = len(jobs)
                jobs.append(GpuJob(group=group, gpu=gid, labels=ident))
            row_job[i] = j
        _fill(jobs, row_job, v, n, covered, duration, t_first, t_last, energy, step, need_power)
        job_of = {key: jobs[j] for key, j in job_ix.items()}
        if need_power or edges:
            edge_jobs = [(i, jobs[int(row_job[i])] if row_job[i] >= 0 else None) for i in edges]
            self._lazy_power(need_power, labels, covered, duration, matchers, unattributed_by_gpu, edge_jobs)
        if regrid:
            self._regrid(regrid, labels, job_of, unattributed_by_gpu, out, matchers)
        out.unattributed_j += sum(unattributed_by_gpu.values())
        out.jobs = list(job_of.values())
        return out

    @staticmethod
    def _power_energy(job: GpuJob, joules: float, covered_s: float, duration_s: float) -> None:
        """Energy from the power gauge (Σ power × step = ``joules``) scaled to the time the series' samples stand
        for (missed scrapes bridged as the window reader bridges them)."""
        if not (joules == joules) or covered_s <= 0:
            return
        e = joules * max(duration_s / covered_s, 1.0)
        job.energy_j += e
        job.energy_from_power_j += e

    def _lazy_power(
        self,
        need: list[tuple[int, GpuJob | None]],
        labels: list[Mapping[str, str]],
        covered: np.ndarray,
        duration: np.ndarray,
        matchers: str,
        unattributed_by_gpu: dict[str, float],
        edges: Sequence[tuple[int, GpuJob | None]] = (),
    ) -> None:
        """Series with samples but no counter value: their energy from the power gauge (asked only then); and
        ``edges``, series with one counter sample: power × step, counted as counter energy (the window reader's
        two half-step edges)."""
        if M.POWER not in self.reader.present:
            return
        _q, R, t_end = self._queries(matchers)
        uuids = sorted({labels[i].get("UUID", "") for i, _j in [*need, *edges]})
        if all(uuids):  # only those GPUs' series: a few, not the chunk's thousands
            alt = "|".join(_re_escape(u) for u in uuids)
            matchers = f'{matchers},UUID=~"{alt}"' if matchers else f'UUID=~"{alt}"'
        sel = f"{M.POWER}{{{matchers}}}" if matchers else M.POWER
        if self.rules_window is not None:
            from flopwatch.fleet.rules import reader_rule

            rule = reader_rule("p_sum", self.reader.present, self.rules_window)
            sel = f"{rule}{{{matchers}}}" if matchers else str(rule)
        got = self.reader.client.query(f"sum by ({self.by}) (sum_over_time({sel}[{R}]))", t_end)
        self.reader.n_queries += 1
        self.reader.n_lazy_queries += 1
        p_sum = {self._row_key(s.labels): float(s.v[0]) for s in got if len(s.v)}
        step = self.reader.plan.step_s
        for i, job in need:
            joules = p_sum.get(self._row_key(labels[i]), math.nan) * step
            if job is not None:
                self._power_energy(job, joules, float(covered[i]), float(duration[i]))
            elif joules == joules:
                gid = M.gpu_id(labels[i])
                unattributed_by_gpu[gid] = unattributed_by_gpu.get(gid, 0.0) + joules
        for i, job in edges:
            joules = p_sum.get(self._row_key(labels[i]), math.nan) * step
            if joules != joules:
                continue
            if job is not None:
                job.energy_j += joules
            else:
                gid = M.gpu_id(labels[i])
                unattributed_by_gpu[gid] = unattributed_by_gpu.get(gid, 0.0) + joules

    def _regrid(
        self,
        gpus: set[str],
        labels: list[Mapping[str, str]],
        jobs: dict[tuple[str, str], GpuJob],
        unattributed_by_gpu: dict[str, float],
        out: SpanChunk,
        matchers: str,
    ) -> None:
        """Read the GPUs whose counter reset at window resolution and replace their GPU-jobs with those."""
        out.regrid_gpus += len(gpus)
        uuids = sorted({lab.get("UUID", "") for lab in labels if M.gpu_id(lab) in gpus})
        whole = not all(uuids)  # GPUs known by host and index only: the whole chunk again
        if whole:
            m = matchers
        else:
            alt = "|".join(_re_escape(u) for u in uuids)
            m = f'{matchers},UUID=~"{alt}"' if matchers else f'UUID=~"{alt}"'
        acc = Accumulator(self.by_labels, self.reader.plan.step_s, self.reader.plan.window_s)
        before = self.reader.n_queries
        for block in self.reader.blocks(m):
            acc.add(block)
        self.reader.n_lazy_queries += self.reader.n_queries - before
        if whole:
            jobs.clear()
            unattributed_by_gpu.clear()
        else:
            for key in [key for key in jobs if key[1] in gpus]:
                del jobs[key]
            for g in gpus:
                unattributed_by_gpu.pop(g, None)
        for j in acc.finish():
            jobs[(j.group, j.gpu)] = j
        out.unattributed_series |= acc.unattributed_series
        # the window reader keeps unattributed energy per read, not per GPU: it replaces these GPUs' span share
        unattributed_by_gpu[" window-resolution re-read"] = acc.unattributed_j


def _window_ends(reader: FleetReader) -> np.ndarray:
    """End times of the windows tiling the range (the window reader's grid)."""
    p = reader.plan
    chunks = reader.time_chunks()
    n = int(round((chunks[-1][1] - p.start) / p.window_s))
    return p.start + p.window_s * np.arange(1, n + 1)


def place(
    N: np.ndarray, t_ends: np.ndarray, gids: list[str], step_s: float, window_s: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Covered time, the time the samples stand for, first and last time of each series (rows of ``N``: sample
    counts per window ending at ``t_ends``): :class:`~.aggregate.Accumulator`'s placement, on arrays.

    A window with samples in the windows on both sides and at least :data:`~.aggregate.FULL_WINDOW` of its scrapes
    stands for the whole window; any other (an edge) for its samples over the series' share of scrapes that
    arrived (its interior windows', else the chunk's median GPU-window's), placed against its neighbour, or at
    the middle of the window when it has none.
    """
    from flopwatch.fleet.aggregate import FULL_WINDOW

    S, K = N.shape
    W, step = float(window_s), float(step_s)
    if S == 0 or K == 0:
        z = np.zeros(S)
        return z, z, np.full(S, np.inf), np.full(S, -np.inf)
    P = N > 0
    prev = np.zeros_like(P)
    prev[:, 1:] = P[:, :-1]
    nxt = np.zeros_like(P)
    nxt[:, :-1] = P[:, 1:]
    interior = P & prev & nxt & (N >= FULL_WINDOW * W / step)
    edge = P & ~interior
    interior_n = np.where(interior, N, 0.0).sum(axis=1)
    interior_w = interior.sum(axis=1)
    # the chunk's share of scrapes that arrived: median over (GPU, window) of the GPU's samples in the window,
    # all its series together, windows before the last one with samples (it may be cut by the end of the range)
    ug, inv = np.unique(np.asarray(gids, dtype=object), return_inverse=True)
    G = np.zeros((len(ug), K))
    np.add.at(G, inv, N)
    cols = np.flatnonzero(P.any(axis=0))
    last_k = cols[-1] if len(cols) else K
    full = G[:, :last_k][G[:, :last_k] > 0]
    fleet_kept = float(np.median(full)) * step / W if full.size else 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        kept = np.where(interior_w > 0, interior_n * step / (np.maximum(interior_w, 1) * W), fleet_kept)
    kept = np.clip(kept, 0.5, 1.0)[:, None]
    span = np.minimum(W, N * step / kept)
    duration = interior_w * W + np.where(edge, span, 0.0).sum(axis=1)
    covered = N.sum(axis=1) * step
    t = t_ends[None, :]
    starts = np.where(nxt, t - span, t - W / 2 - span / 2)
    ends = np.where(prev, t - W + span, t - W / 2 + span / 2)
    t_first = np.where(edge & ~prev, starts, np.inf).min(axis=1)
    t_last = np.where(edge & ~nxt, ends, -np.inf).max(axis=1)
    return covered, duration, t_first, t_last


def _fill(
    jobs: list[GpuJob],
    row_job: np.ndarray,
    v: Mapping[str, np.ndarray],
    n: np.ndarray,
    covered: np.ndarray,
    duration: np.ndarray,
    t_first: np.ndarray,
    t_last: np.ndarray,
    energy: np.ndarray,
    step: float,
    need_power: list[tuple[int, GpuJob | None]],
) -> None:
    """Sum each GPU-job's rows into its fields: the window reader's sums, from per-series totals."""
    J = len(jobs)
    if J == 0:
        return
    sel = row_job >= 0
    ix = row_job[sel]
    S = len(n)

    def total(x: np.ndarray) -> list[float]:
        return np.bincount(ix, weights=x[sel], minlength=J).tolist()

    def has(key: str) -> np.ndarray:
        x = v.get(key)
        return np.zeros(S, bool) if x is None else np.isfinite(x)

    def val(key: str) -> np.ndarray:
        x = v.get(key)
        return np.zeros(S) if x is None else np.where(np.isfinite(x), x, 0.0)

    cov = n * step
    e_ok = np.isfinite(energy)
    p_ok = ~e_ok & has("p_sum")
    safe_cov = np.where(covered > 0, covered, 1.0)
    bridge = np.where(covered > 0, np.maximum(duration / safe_cov, 1.0), 0.0)  # missed scrapes bridged
    from_power = np.where(p_ok, val("p_sum") * step * bridge, 0.0)
    gr_ok = has("gr")
    gu_ok = ~gr_ok & has("gpu_util")
    clock_ok = has("clock")
    clock_mean = np.where(clock_ok & (n > 0), val("clock") / np.where(n > 0, n, 1.0), 0.0)
    cols: dict[str, np.ndarray] = {
        "covered_s": covered,
        "duration_s": duration,
        "energy_j": np.where(e_ok, energy, 0.0) + from_power,
        "energy_from_power_j": from_power,
        "counter_s": np.where(e_ok, cov, 0.0),
        "busy_s": np.where(gr_ok, val("gr") * step, np.where(gu_ok, val("gpu_util") / 100.0 * step, 0.0)),
        "busy_covered_s": np.where(gr_ok | gu_ok, cov, 0.0),
        "sm_active_s": val("sm") * step,
        "dram_active_s": val("dram") * step,
        "dram_covered_s": np.where(has("dram"), cov, 0.0),
        "clock_mhz_s": val("clock") * step,
        "clock_covered_s": np.where(clock_ok, cov, 0.0),
    }
    for pipe in ("tensor", "fp32"):
        a = val(pipe) * step
        cols[f"{pipe}_a"] = a
        cols[f"{pipe}_covered_s"] = np.where(has(pipe), cov, 0.0)
        cols[f"{pipe}_af"] = np.where(clock_ok, a * clock_mean, 0.0)  # Σa × the series' mean clock
    sums = {name: total(x) for name, x in cols.items()}
    others = {
        k: (total(val(k) * step), np.bincount(ix, weights=has(k)[sel].astype(float), minlength=J))
        for k in ("imma", "dfma", "fp16", "fp64")
    }
    n_series = np.bincount(ix, minlength=J).tolist()
    tf = np.full(J, np.inf)
    np.minimum.at(tf, ix, t_first[sel])
    tl = np.full(J, -np.inf)
    np.maximum.at(tl, ix, t_last[sel])
    plim = np.full(J, -np.inf)
    np.maximum.at(plim, ix, np.where(has("plimit"), val("plimit"), -np.inf)[sel])
    sums |= {"n_series": n_series, "t_first": tf.tolist(), "t_last": tl.tolist()}
    names = list(sums)
    # one dict update per GPU-job (≈ 3 × faster than a setattr per field)
    for job, vals in zip(jobs, zip(*sums.values(), strict=True), strict=True):
        job.__dict__.update(zip(names, vals, strict=True))
    if any(seen.any() for _col, seen in others.values()):
        for j, job in enumerate(jobs):
            for k, (col, seen) in others.items():
                if seen[j] > 0:
                    job.other_pipes_s[k] = col[j]
    for j in np.flatnonzero(plim > -math.inf).tolist():
        jobs[j].power_limit_w = float(plim[j])
    for i in np.flatnonzero(sel & ~e_ok & ~p_ok).tolist():
        need_power.append((i, jobs[int(row_job[i])]))
