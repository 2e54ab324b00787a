"""Read a fleet's dcgm-exporter history into one columnar table of GPU-jobs (:class:`GpuJobs`), one GPU chunk at
a time: (series × window) cells, ``np.bincount`` into rows of (GPU, MIG instance, job). Jobs come from labels
(``--by``), a job-info series or mapping file joined per window (:class:`JobMap`), or none (``--by cohort``).
How each cell's energy, time and activity are derived, and what is read: docs/fleet.md, "How it reads".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from itertools import chain, count
from typing import Any

import numpy as np

from flopwatch.devices import resolve
from flopwatch.errors import InputError
from flopwatch.fleet.plan import Chunking, ReadPlan, gpu_matchers, range_str
from flopwatch.telemetry import consistency as C
from flopwatch.telemetry import dcgm_metrics as M
from flopwatch.telemetry.prom_client import Columns, PrometheusClient
from flopwatch.units import nanmedian, unique

#: The series flopwatch's simulated fleets carry (``flopwatch.sim.dcgm``): their output says "simulated".
SIMULATED = "flopwatch_simulated"
#: A window with samples on both sides stands for the whole window only if at least this share of its scrapes
#: arrived; otherwise the series may have left and come back inside it.
FULL_WINDOW = 0.8
#: A series' counter may rise this share over its own time at its mean power (as ``groups.COUNTER_TOLERANCE``).
TOL = 0.10
#: Mean power above idle × this (or idle + 30 W, whichever is more) counts as load for the consistency checks.
LOAD_FACTOR = 1.5
#: Metrics whose series claim the GPU's model (their ``modelName``); the others are read without it.
_MODEL_FROM = ("power", "energy")


@dataclass
class GpuJobs:
    """What each GPU did for each job in the range, one row per (GPU, MIG instance, job); arrays of equal length.

    Times in seconds, energy in joules, activities as ∫ ratio dt (seconds), clocks in MHz."""

    gpu: np.ndarray  # object: GPU id (UUID, else host/index)
    instance: np.ndarray  # object: MIG instance id, "" for a whole GPU
    job: np.ndarray  # object: job key, None where no job is known
    model: np.ndarray  # object: the modelName the GPU reports ("" when absent)
    cohort: np.ndarray  # object: the GPU's busy-interval signature (GPUs that start and stop together)
    energy_j: np.ndarray
    energy_from_power_j: np.ndarray  # part of energy_j from the power gauge
    counter_j: np.ndarray  # counter increments over cells with both counter and power (cross-check) …
    counter_power_j: np.ndarray  # … and the power gauge's energy over the same cells
    covered_s: np.ndarray  # time with samples (samples × step)
    duration_s: np.ndarray  # time the samples stand for (missed scrapes, missing windows between them)
    t_first: np.ndarray
    t_last: np.ndarray
    busy_s: np.ndarray  # ∫ GR_ENGINE_ACTIVE (else GPU_UTIL) dt
    busy_covered_s: np.ndarray
    dram_s: np.ndarray
    dram_covered_s: np.ndarray
    tensor_s: np.ndarray  # ∫ tensor activity dt (HMMA where reported)
    tensor_mhz_s: np.ndarray  # ∫ tensor activity × SM clock dt (window means)
    fp32_s: np.ndarray
    fp32_mhz_s: np.ndarray
    fp16_s: np.ndarray
    fp64_s: np.ndarray
    pipe_covered_s: np.ndarray  # time with any pipe counter
    clock_mhz_s: np.ndarray
    clock_covered_s: np.ndarray
    clock_max_mhz: np.ndarray  # NaN: no clock
    clock_min_mhz: np.ndarray  # lowest window-mean clock under load
    power_limit_w: np.ndarray  # highest limit seen (NaN: none)
    power_limit_min_w: np.ndarray
    peak_power_w: np.ndarray  # highest window-mean power
    min_power_w: np.ndarray  # lowest window-mean power
    resets: np.ndarray
    out_of_range: np.ndarray  # cells with a ratio outside [0, 1]
    prof_covered_s: np.ndarray  # time with profiling counters
    prof_gap_s: np.ndarray  # time with samples but no profiling counter, where the fleet exports them
    prof_zero_load_s: np.ndarray  # time with every profiling counter at 0 while power shows load
    util_no_power_s: np.ndarray  # time with utilisation ≥ 0.5 at the claimed model's idle power
    no_power_s: np.ndarray  # time with samples but no power gauge (the checks of load not made)
    ends_busy: np.ndarray  # series whose telemetry stops (starts) under load inside the range (lag, outage)
    duplicate_s: np.ndarray  # time a GPU is reported twice (more samples than scrapes; two series or jobs)
    mig: np.ndarray  # bool: energy apportioned among MIG instances
    n_series: np.ndarray
    unseen_s: np.ndarray  # time a job source says the job held GPUs that no DCGM series reports (r. 13)

    def __len__(self) -> int:
        return len(self.gpu)

    @staticmethod
    def empty() -> GpuJobs:
        return GpuJobs(**{f.name: np.empty(0) for f in fields(GpuJobs)})


@dataclass(frozen=True)
class JobMap:
    """Jobs joined to GPUs at query time from an info series (``metric``) or a mapping file (``allocations``:
    job, GPU id as :func:`~flopwatch.telemetry.dcgm_metrics.gpu_id` spells it, start, end); docs/fleet.md."""

    metric: str = ""
    job_label: str = "job"
    gpu_labels: tuple[str, ...] = ("Hostname", "gpu")
    allocations: tuple[tuple[str, str, float, float], ...] = ()


@dataclass
class Discovery:
    present: frozenset[str]  # DCGM metric names with series in the range
    keys: list[str]  # GPU chunk keys
    key_label: str
    simulated: bool
    ref_match: str = ""  # the series that list the GPUs: power and the energy counter
    unpowered: bool = False  # some GPUs without a power gauge: samples counted on the energy counter
    ungr: bool = False  # some GPUs without GR_ENGINE_ACTIVE: GPU_UTIL read too


def discover(client: PrometheusClient, plan: ReadPlan) -> Discovery:
    """Which DCGM metrics exist for the selector in the range, and the GPUs (by UUID, else host)."""
    m = plan.matchers
    match = f'{{__name__=~"DCGM_FI_.*"{"," + m if m else ""}}}'
    names = frozenset(client.label_values("__name__", match, plan.start, plan.end))
    if not names:
        raise InputError(f"no DCGM series at {client.display_url} for {('{' + m + '}') if m else 'any selector'} between the "
                         "start and end times (check --selector, --start/--end, and that dcgm-exporter is scraped)", field="selector")  # fmt: skip
    present = names & frozenset(M.METRICS)
    if M.ENERGY not in present and M.POWER not in present:
        raise InputError(f"missing metrics: neither {M.ENERGY} nor {M.POWER} is present, so no energy can be measured "
                         f"(found: {', '.join(sorted(names)[:8])}{' …' if len(names) > 8 else ''})", field="metrics")  # fmt: skip
    # GPUs from either series: one without a power gauge was in no chunk, silently (round 9, `no-power-gauge`)
    ref = "|".join(x for x in (M.POWER, M.ENERGY) if x in present)
    ref_match = f'{{__name__=~"{ref}"{"," + m if m else ""}}}'
    key_label, keys = first_label(client, plan, ref_match, "UUID", "Hostname", "instance")
    # a GPU lacking a series: the counter's samples counted (no power gauge); GPU_UTIL read beside GR_ENGINE_ACTIVE
    # (round 12, `util-mixed`: GPU_UTIL was read only where no GPU had GR, so such a GPU's power went unchecked)
    lacks = lambda x: bool(key_label) and not set(keys) <= set(client.label_values(key_label, f"{x}{{{m}}}", plan.start, plan.end))  # noqa: E731  # fmt: skip
    unpowered, ungr = "|" in ref and lacks(M.POWER), {M.GR_ACTIVE, M.GPU_UTIL} <= present and lacks(M.GR_ACTIVE)  # fmt: skip
    bare = ref_match[:-1] + f',{key_label}=""}}'
    # series without that label are matched by its empty value (round 8, `no-uuid`: they were never read, silently)
    if key_label and client.label_values("__name__", bare, plan.start, plan.end):
        keys.append("")
    simulated = bool(client.label_values("__name__", SIMULATED, plan.start, plan.end))
    return Discovery(present, keys or [""], key_label, simulated, ref_match, unpowered, ungr)


def first_label(client: PrometheusClient, plan: ReadPlan, match: str, *labels: str) -> tuple[str, list[str]]:
    """The first of ``labels`` with values on the series ``match`` in the range, and its values."""
    for label in labels:
        if vals := client.label_values(label, match, plan.start, plan.end):
            return label, vals
    return "", []


def _key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Identity of a series across queries: its labels without ``__name__`` (range functions drop it), in the
    order Prometheus sends them (sorted by name: ``labels.Labels``), so no sort per series."""
    if "__name__" in labels:  # last_over_time keeps the name: drop it with a C-level copy, not a generator
        d = dict(labels)
        del d["__name__"]
        return tuple(d.items())
    return tuple(labels.items())


class FleetReader:
    """Runs the chunked window queries of one plan and turns each GPU chunk into :class:`GpuJobs`."""

    def __init__(
        self,
        client: PrometheusClient,
        plan: ReadPlan,
        found: Discovery,
        chunks: Chunking,
        *,
        by_labels: tuple[str, ...] = (),
        jobs: JobMap | None = None,
        skip: frozenset[str] = frozenset(),
    ) -> None:
        # skip: metric keys not to read (DRAM activity without a profile: only a profile's TB term uses it)
        self.client, self.plan, self.found, self.chunking = client, plan, found, chunks
        self.by_labels, self.jobs, self.skip, self.n_queries = by_labels, jobs, skip, 0
        self.window = range_str(plan.window_s, client.version() < (3, 0))  # closed ranges before 3.0
        self.ends = np.asarray(plan.window_ends())
        self.held: dict[str, float] = {}  # job → GPU-seconds its source says it held in the range

    def unseen(self, seen: dict[str, float]) -> GpuJobs:
        """Per job, the GPU-time its source says it held beyond what series report (``seen``; a scrape or two at
        each edge and 1 % allowed): unobserved, of no known model (round 13, `job-unseen`)."""
        short = {j: h - seen.get(j, 0.0) for j, h in self.held.items()}
        short = {j: x for j, x in short.items() if x > 0.01 * self.held[j] + 4 * self.plan.step_s}
        nan = lambda f: f.endswith(("_mhz", "_w")) or f.startswith("t_")  # noqa: E731  min/max columns: none seen
        t = GpuJobs(**{f.name: np.full(len(short), np.nan if nan(f.name) else 0.0) for f in fields(GpuJobs)})
        t.gpu, t.instance, t.model, t.cohort = (np.full(len(short), x, object) for x in ("(no series)", "", "", ""))  # fmt: skip
        t.job, t.duration_s = np.array(list(short), object), np.array(list(short.values()))
        t.unseen_s = t.duration_s
        return t

    def matchers(self) -> list[str]:
        keys, label = self.found.keys, self.found.key_label
        n = self.chunking.gpus_per_chunk
        return [gpu_matchers(self.plan, label, keys[i : i + n]) for i in range(0, len(keys), n)]

    def queries(self, matchers: str) -> dict[tuple[str, str], str]:
        # chunks matched by UUID: every series has one, so it alone names the GPU and host labels go too
        # (unless a job map joins on them)
        uuid = self.found.key_label == "UUID" and "" not in self.found.keys
        host = ("Hostname", "instance", "gpu") if uuid and self.jobs is None else ()
        keep = {*self.by_labels, *(self.jobs.gpu_labels if self.jobs else ())}
        drop = [x for x in (*M.UNREAD_LABELS, *host) if x not in keep]
        q = M.window_queries(self.found.present, matchers, self.window, self.skip, drop, both=self.found.ungr)
        if "modelName" not in keep:  # the model is claimed by the power and energy series (_fold): the others
            thin = [*drop, "modelName"]  # drop it on the server (a fifth of their bytes)
            q |= {(k, fn): M.window_query(M.BY_KEY[k].name, fn, matchers, self.window, thin)
                  for k, fn in q if k not in _MODEL_FROM}  # fmt: skip
        if ("power", "count") not in q or self.found.unpowered:  # counted on the counter: its third read
            q[("energy", "count")] = M.window_query(M.ENERGY, "count", matchers, self.window, drop)
        if self.jobs is not None and self.jobs.metric:  # the job-info series' samples per job, GPU and window
            by = ", ".join((self.jobs.job_label, *self.jobs.gpu_labels))
            q[("info", "")] = f"sum by ({by}) (count_over_time({self.jobs.metric}[{self.window}]))"
        return q

    def read(
        self, matchers: str, pool: ThreadPoolExecutor, on_query: Callable[[], None] | None = None
    ) -> GpuJobs:
        """The GPU-jobs of one GPU chunk over the whole range."""
        q = self.queries(matchers)
        spans = self.chunking.time_chunks(self.plan)
        futs = {
            (name, i): pool.submit(self.client.query_columns, expr, t0, t1, self.plan.window_s)
            for name, expr in q.items()
            for i, (t0, t1) in enumerate(spans)
        }
        answers: dict[tuple[str, str], list[Columns]] = {}
        for (name, _i), f in futs.items():
            answers.setdefault(name, []).append(f.result())
            self.n_queries += 1
            if on_query is not None:
                on_query()
        info = answers.pop(("info", ""), None)
        return self._fold(answers, info)

    # ---------------------------------------------------------------------------------------------- fold
    @np.errstate(invalid="ignore", divide="ignore")
    def _fold(self, answers: Mapping[tuple[str, str], list[Columns]], info: list[Columns] | None) -> GpuJobs:
        """The GPU-jobs of one chunk's answers (per query, one :class:`Columns` per time chunk)."""
        p = self.plan
        W, step, K = p.window_s, p.step_s, len(self.ends)
        index: dict[tuple[tuple[str, str], ...], int] = {}
        base: dict[tuple[tuple[str, str], ...], int] = {}  # a row's labels without modelName → the row
        rows: dict[tuple[str, str], np.ndarray] = {}
        seen: list[tuple[list[Mapping[str, str]], np.ndarray]] = []
        # power and energy first (the metric table's order): their series make the rows and claim the model
        for name, cs in sorted(answers.items(), key=lambda a: a[0][0] not in _MODEL_FROM):
            labs = list(chain.from_iterable(c.labels for c in cs))
            # the queries of a chunk answer the same series in the same (sorted) order: reuse the rows when the
            # label sets are equal one by one (a comparison, not a key and a lookup per series)
            hit = next((r for ls, r in seen if len(ls) == len(labs) and ls == labs), None)
            if hit is None:
                n = len(index)
                if name[0] in _MODEL_FROM:
                    hit = np.array([index.setdefault(_key(lab), len(index)) for lab in labs], dtype=np.intp)
                else:  # without modelName: the row of the power or energy series with the same other labels
                    hit = np.array([base.get(k) if (k := _key(lab)) in base else index.setdefault(k, len(index))
                                    for lab in labs], dtype=np.intp)  # fmt: skip
                for k in list(index)[n:]:  # new rows: findable without their modelName (the first one stands;
                    base.setdefault(tuple(x for x in k if x[0] != "modelName"), index[k])  # two: impossible)
                seen.append((labs, hit))
            rows[name] = hit
        labels = [dict(k) for k in index]
        S = len(labels)
        if S == 0:
            return GpuJobs.empty()

        def mat(key: str, fn: str) -> np.ndarray:
            a = np.full((S, K), np.nan)
            cs = answers.get((key, fn))
            if cs:
                r = np.repeat(rows[(key, fn)], np.concatenate([c.n for c in cs]))
                t = np.concatenate([c.t for c in cs])
                j = np.rint((t - self.ends[0]) / W).astype(np.intp)
                ok = (j >= 0) & (j < K)
                a[r[ok], j[ok]] = np.concatenate([c.v for c in cs])[ok]
            m = M.BY_KEY[key]
            return a * m.scale if m.scale != 1.0 and fn != "count" else a  # counts are samples, not mJ

        N = np.fmax(mat("power", "count"), mat("energy", "count"))  # the counter's where no power gauge
        L = mat("energy", "last") if ("energy", "last") in answers else None
        Mn = mat("energy", "min") if L is not None else None
        # a counter sample where the gauge counted none is there too (named: no_power_s), as a whole window's
        # scrapes (round 9, `power-stops-idle`: the counter's windows after the gauge stopped were dropped)
        N = np.where(np.isfinite(N) & (N > 0), N, 0.0 if L is None else np.where(np.isfinite(L), W / step, 0.0))  # fmt: skip
        P = N > 0
        gids = [M.gpu_id(lab) for lab in labels]
        ug, gi = _factorize(gids)
        G = len(ug)
        inst = np.array([lab.get(M.MIG_LABEL, "") for lab in labels], dtype=object)
        unit = _units(gi, inst)  # (GPU, MIG instance): each instance repeats its GPU's timeline
        U, g_of_unit = int(unit.max()) + 1, np.zeros(int(unit.max()) + 1, dtype=np.intp)
        g_of_unit[unit] = gi
        # --- placement: the time each cell stands for, and where it starts and ends
        prev, nxt = _shift(P, 1), _shift(P, -1)
        interior = P & prev & nxt & (N >= FULL_WINDOW * W / step)
        gpu_n = _per_gpu(N, gi, G)
        # a series without interior windows (a job shorter than two windows) borrows its GPU's scrape rate: the GPU
        # is scraped the whole time, whichever series (job) holds it (median over its interior windows)
        gp = gpu_n > 0
        g_in = gp & _shift(gp, 1) & _shift(gp, -1)
        gpu_kept = nanmedian(np.where(g_in, gpu_n, np.nan), axis=1) * step / W
        gpu_kept = np.where(np.isfinite(gpu_kept), gpu_kept, 1.0)
        iw = interior.sum(axis=1)
        kept = np.where(iw > 0, np.where(interior, N, 0).sum(axis=1) * step / (np.maximum(iw, 1) * W), gpu_kept[gi])  # fmt: skip
        kept = np.clip(kept, 0.5, 1.0)[:, None]
        span = np.where(interior, W, np.where(P, np.minimum(W, N * step / kept), 0.0))
        p_mean = mat("power", "sum") / np.where(P, N, np.nan)  # all NaN without the power gauge
        # an edge cell alone on its GPU (MIG: instance) stands for at least the time its counter rose at its mean
        # power (round 8, `sparse-edge`: scrapes missed in an edge window were no time at all; round 9: MIG)
        if L is not None:
            rise = np.where(P & (p_mean > 0), (L - Mn) / p_mean, np.nan)
            alone = _per_gpu(P, unit, U)[unit] == 1
            span = np.where(P & ~interior & alone & (rise > span), np.minimum(W, rise), span)
        t = self.ends[None, :]
        c_start = np.where(prev, t - W, np.where(nxt, t - span, t - W / 2 - span / 2))
        c_end = np.where(nxt, t, np.where(prev, t - W + span, t - W / 2 + span / 2))
        # a GPU missing for whole windows between two windows with samples (an outage, a vanished series): that time
        # happened and nothing saw it (unobserved, bounded at peak rate), put on the series present after the gap
        last_seen = np.maximum.accumulate(np.where(gp, np.arange(K), -1), axis=1)
        before = _shift(last_seen, 1, -1)
        c0 = _per_gpu(np.where(P, c_start, np.inf), gi, G, np.minimum, np.inf)
        c1 = _per_gpu(np.where(P, c_end, -np.inf), gi, G, np.maximum, -np.inf)
        span_g = _per_gpu(span, gi, G)
        after_gap = gp & (before >= 0) & (before < np.arange(K) - 1)
        gap = np.where(after_gap, c0 - np.take_along_axis(c1, np.maximum(before, 0), axis=1), 0.0).clip(0.0)
        unseen = np.where(P, gap[gi] * span / np.where(span_g[gi] > 0, span_g[gi], 1.0), 0.0)
        cov = N * step
        p_ok = np.isfinite(p_mean)
        # --- activities
        avg = {m.key: mat(m.key, "avg") for m in M.TABLE if (m.key, "avg") in answers}
        if "hmma" in avg:  # one tensor pipe, two views: per window the larger (r. 9, hmma-under-tensor)
            avg["tensor"] = np.fmax(avg.pop("hmma"), avg.get("tensor", np.nan))
        tensor = avg.get("tensor")
        zero = np.zeros((S, K))

        def integral(a: np.ndarray | None) -> np.ndarray:
            return zero if a is None else np.where(np.isfinite(a) & P, a * cov, 0.0)

        def covered(a: np.ndarray | None) -> np.ndarray:
            return zero if a is None else np.where(np.isfinite(a) & P, cov, 0.0)

        gr, gu = avg.get("gr"), avg.get("gpu_util")
        busy_a = gr if gu is None else (gu if gr is None else np.where(np.isfinite(gr), gr, gu))
        clock = avg.get("clock")
        clock_w = np.where(np.isfinite(clock), clock, 0.0) if clock is not None else zero
        prof = [a for k, a in avg.items() if M.BY_KEY[k].profiling]
        pipes = [k for k in avg if M.BY_KEY[k].name.startswith("DCGM_FI_PROF_PIPE_")]
        # pipe-covered where every pipe field read has a value: one missing is unobserved, not 0 (r. 8, pipe-field-gap)
        prof_all, prof_zero = np.full((S, K), bool(pipes)), np.full((S, K), bool(prof))
        bad = np.zeros((S, K))
        for k, a in avg.items():
            fin = np.isfinite(a)
            if k != "clock":
                bad += fin & ((a < 0) | (a > 1 + 1e-6))
            if M.BY_KEY[k].profiling:
                prof_all &= fin | (k not in pipes)
                prof_zero &= fin & (a == 0)
        idle = np.array([_idle_w(lab.get("modelName", "")) for lab in labels])[:, None]
        load = p_ok & (p_mean > np.maximum(idle * LOAD_FACTOR, idle + 30.0))
        # kernels at least half the time at idle power: impossible (telemetry.consistency, the one rule set)
        util = zero if busy_a is None else busy_a
        dark = P & p_ok & (util >= C.LOADED_UTIL) & (p_mean <= idle * (1 + C.UTIL_POWER_FLOOR_FRACTION))
        # telemetry that stops (starts) under load while the GPU is seen nowhere in the next (previous) window and
        # the range goes on (began); in the last (first) window, where its GPU's longest MIG instance (or whole)
        # falls short of the range's end (start) (round 8, `lag-end`; round 9, `mig-lag-end`; round 12, `lag-start`)
        g_any, ks = _per_gpu(P, gi, G, np.logical_or, False), np.arange(K)[None, :]
        short = _per_gpu(_per_gpu(span, unit, U), g_of_unit, G, np.maximum)[gi] < W - 2 * step
        stops = P & ~next_any(P) & load & ~_shift(g_any, -1)[gi] & ((ks < K - 1) | short)
        stops |= P & (np.cumsum(P, axis=1) == 1) & load & ~_shift(g_any, 1)[gi] & ((ks > 0) | short)
        # more samples than scrapes per GPU and MIG instance (each instance repeats the GPU's series: not twice)
        dup = (_per_gpu(N, unit, U) > 1.05 * W / step + 1)[unit] & P
        # --- energy: per GPU and window (the counter is the GPU's), shared among the series present
        is_mig = inst != ""
        # a whole-GPU series beside MIG instances of it, window after window: one GPU twice (r. 8, mig-beside-whole)
        if is_mig.any() and not is_mig.all():
            m = [_per_gpu(P & (is_mig == x)[:, None], gi, G, np.logical_or, False) for x in (True, False)]
            both = m[0] & m[1]
            dup |= (both & (_shift(both, 1) | _shift(both, -1)))[gi] & P
        if L is not None:
            # one counter per GPU (MIG: instance): its series in a window hold stretches of it that follow each
            # other (A, B) or nest (A, B, A: the outer one's counter also counts the inner one's energy). A series
            # whose counter rose over more than its own time, beyond the stretches of the series inside it, reports
            # one GPU twice, whatever share of the scrapes each copy has (round 9, `twin-20`). Rare honestly: one by one
            far = P & (rise > (1 + TOL) * span + 2 * step)
            mates = np.split(np.argsort(unit, kind="stable"), np.cumsum(np.bincount(unit, minlength=U))[:-1])
            for i, k in zip(*np.nonzero(far & (_per_gpu(P, unit, U)[unit] > 1)), strict=True):
                m = mates[unit[i]]
                # its counter's rise less the stretches inside it, against its own time at its power, and two
                # scrapes around each stretch at the most power in the window
                o = m[(m != i) & P[m, k] & (Mn[m, k] >= Mn[i, k]) & (L[m, k] <= L[i, k])]
                own, pw = L[i, k] - Mn[i, k] - np.sum(L[o, k] - Mn[o, k]), np.nanmax(p_mean[m, k])
                lim = (1 + TOL) * span[i, k] * p_mean[i, k] + 2 * step * (len(o) + 1) * pw
                dup[m, k] |= (own > lim) & P[m, k]
        energy, from_power, counter_j, counter_power_j, resets = _gpu_energy(
            P, span, p_mean, L, Mn, busy_a, gi, G, inst, unit, g_of_unit, step, idle
        )
        # --- jobs per cell (with their share of it), then cells summed into rows of (GPU, instance, job)
        src, names, wt, twice = self._cell_jobs(labels, gids, info, c_start, c_end)
        dup |= twice & P
        # a GPU (one UUID) has one model: every modelName its series report is its claim (two: " | ", impossible)
        claims: dict[int, set[str]] = {}
        for g, lab in zip(gi.tolist(), labels, strict=True):
            claims.setdefault(g, set()).add(lab.get("modelName", ""))
        models = np.array([" | ".join(sorted(claims[g])) for g in range(G)], dtype=object)[gi]
        g_busy = _per_gpu(_busy(busy_a, load, P), gi, G, np.logical_or, False)
        g_sig = np.array(_signatures(g_busy, self.ends, W), dtype=object)
        jobs_u, jinv = _factorize(["\x00" if j is None else j for j in names])
        Pw = P[src] & (wt > 0)
        sel = Pw.ravel()
        row_key = np.broadcast_to((unit[src] * len(jobs_u) + jinv)[:, None], Pw.shape)
        rk, rows_of = np.unique(row_key.ravel()[sel], return_inverse=True)
        R = len(rk)
        w_sel = wt.ravel()[sel]

        def tot(x: np.ndarray, weighted: bool = True) -> np.ndarray:
            v = np.broadcast_to(x, (S, K))[src].ravel()[sel].astype(float)
            return np.bincount(rows_of, weights=v * w_sel if weighted else v, minlength=R)

        def red(x: np.ndarray, ufunc: np.ufunc, init: float) -> np.ndarray:
            out = np.full(R, init)
            ufunc.at(out, rows_of, x[src].ravel()[sel])
            return np.where(np.isfinite(out), out, np.nan)

        series_of = np.broadcast_to(src[:, None], Pw.shape).ravel()[sel]
        one = np.zeros(R, dtype=np.intp)
        one[rows_of] = series_of  # a series of each row (they share GPU and instance)
        pairs = unique(rows_of.astype(np.int64) * S + series_of) // S  # the (row, series) pairs' rows
        clock_max, plimit = mat("clock", "max"), mat("plimit", "max")  # all NaN where not exported
        fin = lambda a, fill: np.where(np.isfinite(a) & P, a, fill)  # noqa: E731
        pipe_cov = np.maximum(covered(tensor), covered(avg.get("fp32")))
        return GpuJobs(
            gpu=ug[gi[one]],
            instance=inst[one],
            job=np.array([None if j == "\x00" else j for j in jobs_u[rk % len(jobs_u)]], dtype=object),
            model=models[one],
            cohort=g_sig[gi[one]],
            energy_j=tot(energy),
            energy_from_power_j=tot(from_power),
            counter_j=tot(counter_j),
            counter_power_j=tot(counter_power_j),
            covered_s=tot(cov),
            duration_s=tot(span + unseen),
            t_first=red(fin(c_start, np.inf), np.minimum, np.inf),
            t_last=red(fin(c_end, -np.inf), np.maximum, -np.inf),
            busy_s=tot(integral(busy_a)),
            busy_covered_s=tot(covered(busy_a)),
            dram_s=tot(integral(avg.get("dram"))),
            dram_covered_s=tot(covered(avg.get("dram"))),
            tensor_s=tot(integral(tensor)),
            tensor_mhz_s=tot(integral(tensor) * clock_w),
            fp32_s=tot(integral(avg.get("fp32"))),
            fp32_mhz_s=tot(integral(avg.get("fp32")) * clock_w),
            fp16_s=tot(integral(avg.get("fp16"))),
            fp64_s=tot(integral(avg.get("fp64"))),
            pipe_covered_s=tot(pipe_cov),
            clock_mhz_s=tot(integral(clock)),
            clock_covered_s=tot(covered(clock)),
            clock_max_mhz=red(fin(clock_max, -np.inf), np.maximum, -np.inf),
            clock_min_mhz=red(np.where(load & (clock_w > 0), clock_w, np.inf), np.minimum, np.inf),
            power_limit_w=red(fin(plimit, -np.inf), np.maximum, -np.inf),
            power_limit_min_w=red(fin(plimit, np.inf), np.minimum, np.inf),
            peak_power_w=red(fin(p_mean, -np.inf), np.maximum, -np.inf),
            min_power_w=red(fin(p_mean, np.inf), np.minimum, np.inf),
            resets=tot(resets, weighted=False),
            out_of_range=tot(bad > 0, weighted=False),
            prof_covered_s=tot(np.where(prof_all & P, cov, 0.0)),
            prof_gap_s=tot(np.where(~prof_all & P, span, 0.0)) if prof else np.zeros(R),
            prof_zero_load_s=tot(np.where(prof_zero & load, span, 0.0)),
            util_no_power_s=tot(np.where(dark, span, 0.0)),
            no_power_s=tot(np.where(P & ~p_ok, span, 0.0)),
            ends_busy=tot(stops, weighted=False),
            duplicate_s=tot(np.where(dup, span, 0.0)),
            mig=is_mig[one],
            n_series=np.bincount(pairs, minlength=R).astype(float),
            unseen_s=np.zeros(R),
        )

    def _cell_jobs(
        self,
        labels: list[dict[str, str]],
        gids: list[str],
        info: list[Columns] | None,
        c_start: np.ndarray,
        c_end: np.ndarray,
    ) -> tuple[np.ndarray, list[str | None], np.ndarray, np.ndarray]:
        """(series index, job, share of each cell) triples, and the cells whose GPU two jobs held at once: the
        join of docs/fleet.md, "Groups" (from labels, or per window from :attr:`jobs`)."""
        S, K = c_start.shape
        if self.jobs is None:
            names = [M.group_key(lab, self.by_labels) if self.by_labels else None for lab in labels]
            return np.arange(S), names, np.ones((S, K)), np.zeros((S, K), bool)
        owner: dict[str, dict[str, np.ndarray]] = {}  # GPU key → job → samples or seconds per window
        W = self.plan.window_s
        t0s, t1s = self.ends - W, self.ends
        spans: dict[str, dict[str, tuple[float, float]]] = {}  # mapping file: GPU → job → (start, end) hull
        for job, gpu, t0, t1 in self.jobs.allocations:
            a, b = spans.setdefault(gpu, {}).get(job, (t0, t1))
            spans[gpu][job] = (min(a, t0), max(b, t1))
            owner.setdefault(gpu, {}).setdefault(job, np.zeros(K))
        by_time = set(owner)
        for s in chain.from_iterable(c.series() for c in info or ()):
            job = s.labels.get(self.jobs.job_label)
            if not job:
                continue
            x, gl = s.labels, self.jobs.gpu_labels
            key = x.get("UUID", "") if gl == ("UUID",) else f"{x.get(gl[0], '?')}/gpu{x.get(gl[-1], '?')}"
            a = owner.setdefault(key, {}).setdefault(job, np.zeros(K))
            j = np.rint((s.t - self.ends[0]) / W).astype(np.intp)
            ok = (j >= 0) & (j < K) & np.isfinite(s.v)
            np.add.at(a, j[ok], np.maximum(s.v[ok], 0.0))
        if not self.held:  # once: each chunk reads the whole job source (GPU-s per job, seen or not; r. 13)
            for gpu, j, c in ((gpu, j, c) for gpu, js in owner.items() for j, c in js.items()):
                a, b = spans.get(gpu, {}).get(j, (0.0, 0.0))
                got = max(0.0, min(b, self.plan.end) - max(a, self.plan.start)) + np.minimum(c, W / self.plan.step_s).sum() * self.plan.step_s  # fmt: skip
                self.held[j] = self.held.get(j, 0.0) + float(got)
        src: list[int] = []
        names: list[str | None] = []
        rows: list[np.ndarray] = []
        cell = np.maximum(c_end - c_start, 1e-9)
        twice = np.zeros((S, K), bool)  # cells whose GPU two jobs held at once (a GPU reported twice)
        for i, lab in enumerate(labels):
            host = lab.get("Hostname") or lab.get("instance", "?")
            key = next((k for k in (gids[i], f"{host}/gpu{lab.get('gpu', '?')}") if k in owner), None)
            if key is None:
                src.append(i), names.append(None), rows.append(np.ones(K))
                continue
            held = owner[key]
            if key in by_time:  # seconds of overlap with the time the cell stands for
                lo, hi, w = np.maximum(c_start[i], t0s), np.minimum(c_end[i], t1s), cell[i]
                sp = spans[key].items()
                shares = {j: (np.minimum(hi, t1) - np.maximum(lo, t0)).clip(0.0) / w for j, (t0, t1) in sp}
            else:  # info samples: a window a job holds between two it holds is whole; its edges by their samples
                # over a whole window's, the median of the GPU's inner windows (round 8, `info-burst`)
                total = np.sum(list(held.values()), axis=0)
                inner = {
                    j: (c > 0) & np.r_[False, c[:-1] > 0] & np.r_[c[1:] > 0, False] for j, c in held.items()
                }
                mid = total[np.any(list(inner.values()), axis=0)]
                whole = float(nanmedian(mid, 0)) if mid.size else float(total.max())
                full = max(whole, 1.0) * cell[i] / W
                shares = {j: np.where(inner[j], 1.0, c / np.maximum(total, full)) for j, c in held.items()}
                twice[i] = total > 1.05 * max(whole, W / self.plan.step_s)  # more than one job's: overlap
            tot = np.sum(list(shares.values()), axis=0)
            twice[i] |= tot > 1.0 + 1e-6
            scale = np.where(tot > 1.0, 1.0 / np.maximum(tot, 1e-12), 1.0)
            for j, sh in shares.items():
                src.append(i), names.append(j), rows.append(sh * scale)
            src.append(i), names.append(None), rows.append(np.clip(1.0 - tot * scale, 0.0, 1.0))
        return np.asarray(src, dtype=np.intp), names, np.asarray(rows), twice


@np.errstate(invalid="ignore", divide="ignore")
def _gpu_energy(P: np.ndarray, span: np.ndarray, p_mean: np.ndarray, L: np.ndarray | None, Mn: np.ndarray | None,
                busy: np.ndarray | None, gi: np.ndarray, G: int, inst: np.ndarray, unit: np.ndarray,
                g_of_unit: np.ndarray, step: float, idle: np.ndarray) -> tuple[np.ndarray, ...]:  # fmt: skip
    """(energy, of it from power, counter rise and power energy where both are exact, resets) per (series, window):
    each GPU's counter (or power gauge) energy per window, shared among its series (docs/fleet.md, "How it reads")."""
    S, K = P.shape
    p_ok = np.isfinite(p_mean)
    e_power = np.where(p_ok & P, p_mean * span, 0.0)

    def per_gpu(x: np.ndarray) -> np.ndarray:  # Σ over one instance's series, the largest instance
        return _per_gpu(_per_gpu(x, unit, len(g_of_unit)), g_of_unit, G, np.maximum)

    Pg = per_gpu(e_power)
    Gp = _per_gpu(P, gi, G, np.logical_or, False)
    gprev = _shift(Gp, 1)
    Eg, from_g = Pg.copy(), Pg.copy()
    counter_g, cpower_g, reset_g = np.zeros((G, K)), np.zeros((G, K)), np.zeros((G, K), bool)
    if L is not None and Mn is not None:
        e_ok = P & np.isfinite(L) & np.isfinite(Mn)
        Lg = _per_gpu(np.where(e_ok, L, -np.inf), gi, G, np.maximum, -np.inf)
        Mg = _per_gpu(np.where(e_ok, Mn, np.inf), gi, G, np.minimum, np.inf)
        pg_mean = _per_gpu(np.where(p_ok & P, p_mean, -np.inf), gi, G, np.maximum, -np.inf)
        half = np.where(np.isfinite(pg_mean), 0.5 * step * pg_mean, 0.0)
        eg_ok = np.isfinite(Lg)
        Lg = np.where(eg_ok, Lg, np.nan)
        prev_l = _ffill_prev(Lg)
        has_prev = np.isfinite(prev_l)
        first = eg_ok & ~has_prev
        # a first window has no previous value: a range over twice the power gauge's energy, or under 90 % of it with
        # its edges (round 11, `reset-edge`: a reload inside it), spans a reset, like a later window's min under the last
        reset_g = eg_ok & ((has_prev & (Mg < prev_l)) | (first & (Pg > 0) & (Lg - Mg > 2.0 * Pg + 1e4)))
        reset_g |= first & (Pg > 0) & (Lg - Mg + 2.0 * half < 0.9 * Pg - 1e4)
        d = np.where(eg_ok & has_prev & ~reset_g, Lg - np.where(has_prev, prev_l, 0.0), 0.0)
        lastg = eg_ok & ~next_any(eg_ok)
        c = d + np.where(first | reset_g, Lg - np.where(eg_ok, Mg, 0.0), 0.0)
        c = c + np.where(first, half, 0.0) + np.where(lastg, half, 0.0)
        use_counter = eg_ok & ~(reset_g & (Pg > 0))
        Eg = np.where(use_counter, c, Pg)
        from_g = np.where(use_counter, 0.0, Pg)
        both = eg_ok & has_prev & ~reset_g & (Pg > 0) & gprev
        counter_g = np.where(both, d, 0.0)
        cpower_g = np.where(both, Pg, 0.0)
    # shares of each GPU window among its series: by power energy; MIG instances (whose power is the whole GPU's):
    # the idle part (datasheet idle × time) by time, the rest by graphics activity × time
    is_mig = (inst != "")[:, None]
    a = np.zeros((S, K)) if busy is None else np.where(np.isfinite(busy), np.maximum(busy, 0.0), 0.0)
    span_p = np.where(P, span, 0.0)
    span_g = _per_gpu(span_p, gi, G)
    by_time = np.where(span_g[gi] > 0, span_p / span_g[gi], 0.0)
    w = np.where(P & ~is_mig, np.where(p_ok, e_power, span), 0.0)  # whole GPUs apart (r. 9, mig-beside-whole)
    wg = _per_gpu(w, gi, G)
    share = np.where(wg[gi] > 0, w / wg[gi], by_time)
    if is_mig.any():
        idle_w = np.zeros(G)
        np.maximum.at(idle_w, gi, idle.ravel())
        base = np.minimum(idle_w[:, None] * per_gpu(span_p), Eg)
        wa = np.where(P, a * span, 0.0)
        wag = _per_gpu(wa, gi, G)
        dyn = np.where(wag[gi] > 0, wa / wag[gi], by_time)
        mig = (base[gi] * by_time + (Eg - base)[gi] * dyn) / np.where(Eg[gi] > 0, Eg[gi], 1.0)
        share = np.where(is_mig, np.where(Eg[gi] > 0, mig, by_time), share)
    return tuple(x[gi] * share for x in (Eg, from_g, counter_g, cpower_g, reset_g))


def _per_gpu(x: np.ndarray, gi: np.ndarray, G: int, uf: np.ufunc = np.add, init: float = 0.0) -> np.ndarray:
    """The rows of ``x`` (series × window) reduced into their GPU's row (``gi``) with ``uf``, from ``init``."""
    K = x.shape[1]
    # flat cells: numpy's fast 1-D ``ufunc.at``, series order
    cells = (gi[:, None] * K + np.arange(K)).ravel()
    if uf is np.logical_or:  # a count of true cells (logical_or.at has no fast path: ≈ 2 × slower)
        return (np.bincount(cells[x.astype(bool, copy=False).ravel()], minlength=G * K) > 0).reshape(G, K)
    out = np.full(G * K, init)
    uf.at(out, cells, x.astype(float, copy=False).reshape(-1))
    return out.reshape(G, K)


def _units(gi: np.ndarray, inst: np.ndarray) -> np.ndarray:
    """Each series' (GPU, MIG instance) unit index, in (GPU, instance) order."""
    names, code = _factorize(inst.tolist())
    return np.unique(gi.astype(np.int64) * len(names) + code, return_inverse=True)[1].ravel()


def _factorize(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` for strings, through a dict: sorting an object array compares
    Python objects pairwise (≈ 10 × slower on a chunk's thousands of series)."""
    first: dict[str, int] = {}  # each value → the position of its first occurrence
    pos = np.fromiter(map(first.setdefault, values, count()), dtype=np.intp, count=len(values))
    uniq = sorted(first)
    rank = np.empty(len(values), dtype=np.intp)
    rank[[first[u] for u in uniq]] = np.arange(len(uniq))
    return np.array(uniq, dtype=object), rank[pos]


def _shift(a: np.ndarray, k: int, fill: Any = False) -> np.ndarray:
    """The cell before each cell in its row (``k`` = 1; −1: after it), ``fill`` at the row's edge."""
    out, K = np.full_like(a, fill), a.shape[1]
    out[:, max(k, 0) : K + min(k, 0)] = a[:, max(-k, 0) : K - max(k, 0)]
    return out


def _ffill_prev(a: np.ndarray) -> np.ndarray:
    """For each cell, the last finite value strictly before it in its row (NaN if none)."""
    last = np.maximum.accumulate(np.where(np.isfinite(a), np.arange(a.shape[1]), -1), axis=1)
    src = _shift(last, 1, -1)
    return np.where(src >= 0, np.take_along_axis(a, np.maximum(src, 0), axis=1), np.nan)


def next_any(P: np.ndarray) -> np.ndarray:
    """Cells with a present cell anywhere after them in the row."""
    c = np.cumsum(P[:, ::-1], axis=1)[:, ::-1]
    return (c - P) > 0


@functools.lru_cache(maxsize=256)
def _idle_w(model: str) -> float:
    """The claimed model's datasheet idle power (50 W when unknown): the load threshold of the checks."""
    spec = resolve(model, cpu=False)
    return 50.0 if spec is None else float(spec.idle_w)


def _busy(util: np.ndarray | None, load: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Busy cells: mean utilisation over 5 % (the Jetson study's detection threshold, Fowler 2026) or power above idle
    (round 12, `cohort-split`: a utilisation dip reported under load split a job's GPUs into cohorts, each "below")."""
    if util is None:
        return load & P
    with np.errstate(invalid="ignore"):
        return P & (load | (util > 0.05))


def _signatures(busy: np.ndarray, ends: np.ndarray, W: float) -> list[str]:
    """Each GPU's busy intervals as text (window starts and ends, UTC): GPUs with the same one form a cohort."""
    import datetime as _dt

    def iso(x: float) -> str:
        return _dt.datetime.fromtimestamp(x, tz=_dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")

    b = np.zeros((busy.shape[0], busy.shape[1] + 2), dtype=np.int8)
    b[:, 1:-1] = busy
    d = np.diff(b, axis=1)
    # row-major: each row's starts, and its stops, in order; a row has as many of each
    rows, starts = np.nonzero(d == 1)
    stops = np.nonzero(d == -1)[1]
    first = [iso(e - W) for e in ends.tolist()]  # window edges, not sample times: the key says so
    last = [iso(e) for e in ends.tolist()]
    spans: list[list[str]] = [[] for _ in range(busy.shape[0])]
    for g, a, z in zip(rows.tolist(), starts.tolist(), stops.tolist(), strict=True):
        spans[g].append(f"{first[a]}→{last[z - 1]}")
    w = f"{W / 3600:g} h" if W >= 3600 and W % 3600 == 0 else f"{W / 60:g} min" if W % 60 == 0 else f"{W:g} s"
    return [f"busy {w} windows {' + '.join(sp)}" if sp else "idle" for sp in spans]
