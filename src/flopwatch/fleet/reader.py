"""Chunked reading of dcgm-exporter history: Prometheus does the per-sample work, flopwatch gets window sums.

For every window of ``window_s`` (default 1 h) and every series, Prometheus evaluates range functions over the
raw samples (``last_over_time``, ``min_over_time``, ``resets``, ``count_over_time``, ``avg_over_time``). Only
those window aggregates cross the network: a day of a GPU at a 15 s scrape is 5760 samples per metric but 24
points here. The pipe estimator weights activity by the SM clock with the window means (Σa · mean f); with
``exact_clock`` a subquery multiplies each activity sample by the clock of the same instant
(``sum_over_time((last_over_time(A[step]) * last_over_time(CLOCK[step]))[window:step])``), exact when clock and
activity move together inside a window (power capping) but about ten times the Prometheus work.

Memory is bounded by the chunk: the fleet is read ``gpus_per_chunk`` GPUs (by ``UUID``, else by host) at a time
and ``time_chunk_s`` at a time; the only state carried between time chunks is one counter value per series.

Range boundaries: Prometheus 2.x range selectors include both ends, 3.x only the right one. To tile time without
counting a sample twice, ranges are ``window − 1 ms`` on 2.x (sample timestamps are whole milliseconds).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flopwatch.errors import InputError
from flopwatch.telemetry import dcgm_metrics as M
from flopwatch.telemetry.prom_client import MAX_POINTS_PER_SERIES, PrometheusClient, Series

#: The series flopwatch's simulated fleets carry (``flopwatch.sim.dcgm``): their output says "simulated".
SIMULATED = "flopwatch_simulated"

#: Above this step a range subquery at ``step`` would fall outside Prometheus's default 5 min lookback, and job
#: boundaries blur by more than the scrape intervals dcgm-exporter deployments use (15–60 s).
MAX_STEP_S = 300.0


@dataclass(frozen=True)
class ReadPlan:
    """What to read: time range, resolution, chunking."""

    start: float
    end: float
    step_s: float = 15.0  # the scrape interval of the dcgm-exporter job
    window_s: float = 3600.0  # Prometheus-side aggregation window
    time_chunk_s: float = 6 * 3600.0
    gpus_per_chunk: int = 32  # measured best on 1024 GPUs (benchmarks/bench_fleet.py); memory grows with it
    matchers: str = ""  # label matchers of --selector, without braces
    concurrency: int = 4  # queries in flight at once (Prometheus evaluates them in parallel)
    exact_clock: bool = (
        False  # pipe × clock per sample (a subquery: ~10× the Prometheus work) vs window means
    )
    #: Recording rules (:mod:`flopwatch.fleet.rules`): "auto" uses them when they match the plan, "require"
    #: fails when they don't, "off" reads raw series only.
    rules: str = "auto"
    #: Chunks when reading rule series: one sample per series and window, so a chunk of 128 GPUs × 48 h of 1 h
    #: windows is ~1 M numbers across all queries (memory still bounded by the chunk, not the fleet).
    rules_gpus_per_chunk: int = 128
    rules_time_chunk_s: float = 48 * 3600.0
    #: "window": window aggregates folded here (exact edges and per-window clock weighting); "span": per-series
    #: totals over the range from Prometheus (:mod:`flopwatch.fleet.span`: fewer evaluations, a smaller answer).
    resolution: str = "window"
    #: GPUs per chunk at span resolution: the answer is one number per series and metric, so chunks can be large
    span_gpus_per_chunk: int = 256

    def check(self) -> ReadPlan:
        if not self.end > self.start:
            raise InputError(f"end ({self.end:.0f}) must be after start ({self.start:.0f})", field="end")
        if self.step_s > MAX_STEP_S:
            raise InputError(
                f"step {self.step_s:g} s is too coarse: at most {MAX_STEP_S:g} s (Prometheus's lookback); use the "
                "dcgm-exporter scrape interval (typically 15–60 s)",
                field="step",
            )
        if self.step_s > (self.end - self.start) / 2:
            raise InputError(
                f"step {self.step_s:g} s is too coarse for a {self.end - self.start:g} s range (fewer than two "
                "samples per series)",
                field="step",
            )
        if self.window_s < self.step_s:
            raise InputError("window must be at least one step", field="window")
        if self.gpus_per_chunk < 1:
            raise InputError("gpus_per_chunk must be >= 1", field="gpus_per_chunk")
        if self.rules not in ("auto", "require", "off"):
            raise InputError(f"rules must be auto, require or off, got {self.rules!r}", field="rules")
        if self.resolution not in ("window", "span"):
            raise InputError(
                f"resolution must be window or span, got {self.resolution!r}", field="resolution"
            )
        if self.resolution == "span" and self.exact_clock:
            raise InputError(
                "exact clock weighting multiplies activity and clock per sample: it needs --resolution window",
                field="resolution",
            )
        return self


@dataclass
class WindowBlock:
    """Window aggregates of the series of one (GPU chunk, time chunk): ``values[query][i]`` per series ``i``."""

    t: np.ndarray  # window end times (s)
    labels: list[Mapping[str, str]]
    values: dict[str, np.ndarray]  # query name → (n_series, n_windows), NaN where absent
    present: frozenset[str] = field(default_factory=frozenset)


def _ms_range(seconds: float, closed: bool) -> str:
    ms = int(round(seconds * 1000))
    return f"{ms - 1 if closed else ms}ms"


def _queries(
    present: frozenset[str], m: str, W: str, s: str, R_sub: str, exact_clock: bool = False
) -> dict[str, str]:
    """PromQL per query name, for the metrics present. ``m``: matchers; W: window range; s: step range."""
    sel = (lambda name: f"{name}{{{m}}}") if m else (lambda name: name)
    q: dict[str, str] = {}
    if M.ENERGY in present:
        e = sel(M.ENERGY)
        q |= {
            "e_last": f"last_over_time({e}[{W}])",
            "e_first": f"min_over_time({e}[{W}])",
            "e_max": f"max_over_time({e}[{W}])",  # the value before a reset inside the window
            "e_resets": f"resets({e}[{W}])",
            "e_n": f"count_over_time({e}[{W}])",
        }
    if M.POWER in present:
        q["p_sum"] = f"sum_over_time({sel(M.POWER)}[{W}])"
        q["p_n"] = f"count_over_time({sel(M.POWER)}[{W}])"
    for key, name in (
        ("gr", M.GR_ACTIVE),
        ("gpu_util", M.GPU_UTIL if M.GR_ACTIVE not in present else ""),  # a fallback only
        ("sm", M.SM_ACTIVE),
        ("dram", M.DRAM),
        ("clock", M.SM_CLOCK),
        ("imma", M.IMMA),
        ("dfma", M.DFMA),
        ("fp16", M.FP16),
        ("fp64", M.FP64),
    ):
        if name and name in present:  # one query per gauge: its count is the power's (same scrape)
            q[f"{key}_avg"] = f"avg_over_time({sel(name)}[{W}])"
    if M.POWER_LIMIT in present:
        q["plimit"] = f"max_over_time({sel(M.POWER_LIMIT)}[{W}])"
    # The tensor pipe: HMMA where the GPU reports it (Hopper), else TENSOR_ACTIVE.
    pipes = [("tensor", M.HMMA if M.HMMA in present else M.TENSOR), ("fp32", M.FP32)]
    for key, name in pipes:
        if name not in present:
            continue
        q[f"{key}_avg"] = f"avg_over_time({sel(name)}[{W}])"
        if M.SM_CLOCK in present and exact_clock:
            q[f"{key}_af"] = (
                f"sum_over_time((last_over_time({sel(name)}[{s}]) * last_over_time({sel(M.SM_CLOCK)}[{s}]))"
                f"[{R_sub}])"
            )
    return q


class FleetReader:
    """Plans and runs the chunked queries of one :class:`ReadPlan` against one Prometheus."""

    def __init__(self, client: PrometheusClient, plan: ReadPlan) -> None:
        self.client = client
        self.plan = plan.check()
        self.present: frozenset[str] = frozenset()
        self.n_queries = 0
        self.n_lazy_queries = 0  # asked on demand (_on_demand): rare
        self.rules_used = False  # reading the recording-rule series (flopwatch.fleet.rules), not raw samples
        self.rules_note = ""  # why not, when rules were asked for ("auto") but not used
        self.rule_names: frozenset[str] | None = None  # flopwatch rule names in the range (rules.rule_names)
        self.alongside: Future[Any] | None = None  # discover()'s ``alongside`` call
        self.simulated = False  # the range holds flopwatch's simulation marker (discover)

    # ----------------------------------------------------------------------------------- discovery
    def discover(
        self, alongside: Callable[[ReadPlan], Any] | None = None
    ) -> tuple[frozenset[str], list[str], str]:
        """Which DCGM metrics exist for the selector in the range, and the GPU chunk keys (label, values).

        The round trips here are on the estimate's critical path, before any chunk is read, so what does not
        depend on an answer is asked at once: the metric names with the rule names; once the span is fixed (a
        ``--rules require`` start moved onto the rule grid), the rules' coverage with the GPU keys and
        ``alongside(plan)`` (the caller's own set-up: its answer, or its exception, is :attr:`alongside`).
        """
        from concurrent.futures import ThreadPoolExecutor

        from flopwatch.fleet.rules import rule_names

        p = self.plan
        m = p.matchers
        match = f'{{__name__=~"DCGM_FI_.*"{"," + m if m else ""}}}'
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="flopwatch-discover") as pool:
            f_rules = None
            if p.rules != "off":
                # once, over the widest span the checks may look at (a window before start: the grid widening)
                f_rules = pool.submit(
                    rule_names, self.client, p.window_s, p.start - p.window_s, p.end + p.window_s
                )
                pool.submit(self.client.version)  # cached: the checks' ranges depend on it
            # with the marker of flopwatch's simulated fleets (sim.dcgm): one lookup of the series index, not two
            found = self.client.label_values(
                "__name__", [match, f'{{__name__="{SIMULATED}"}}'], p.start, p.end
            )
            self.simulated = SIMULATED in found
            names = frozenset(n for n in found if n != SIMULATED)
            if not names:
                raise InputError(
                    f"no DCGM series at {self.client.display_url} for {('{' + m + '}') if m else 'any selector'} "
                    "between the start and end times (empty result: check --selector, --start/--end, and that "
                    "dcgm-exporter is scraped)",
                    field="selector",
                )
            self.present = names & frozenset(M.METRICS)
            if M.ENERGY not in self.present and M.POWER not in self.present:
                raise InputError(
                    f"missing metrics: neither {M.ENERGY} nor {M.POWER} is present, so no energy can be measured "
                    f"(found: {', '.join(sorted(names)[:8])}{' …' if len(names) > 8 else ''})",
                    field="metrics",
                )
            if f_rules is not None:
                self.rule_names = f_rules.result()
            grid = self._rules_grid()  # may move the start onto the rule grid
            f_along = pool.submit(alongside, self.plan) if alongside is not None else None
            # the GPU keys as the rule series know them (rules may be kept longer than raw samples), asked before
            # the coverage checks say whether the rules are used (then, rarely, asked again of the raw series)
            f_keys = pool.submit(self._gpu_keys, True) if grid is not None else None
            if grid is not None:
                self._check_rules(*grid)
            if f_keys is not None and self.rules_used:
                keys = f_keys.result()
            else:
                keys = self._gpu_keys(self.rules_used)
            self.alongside = f_along
        return self.present, keys[0], keys[1]

    def _gpu_keys(self, rules: bool) -> tuple[list[str], str]:
        """The GPU chunk keys: the values of the first of UUID, Hostname, instance the series carry."""
        from flopwatch.fleet.rules import reader_rule

        p = self.plan
        ref = M.ENERGY if M.ENERGY in self.present else M.POWER
        if rules:
            ref = (
                reader_rule("e_last" if M.ENERGY in self.present else "p_sum", self.present, p.window_s)
                or ref
            )
        ref_match = f"{ref}{{{p.matchers}}}" if p.matchers else ref
        for label in ("UUID", "Hostname", "instance"):
            vals = self.client.label_values(label, ref_match, p.start, p.end)
            if vals:
                return vals, label
        return [""], ""

    def _needed_rules(self) -> list[str]:
        return list(_queries(self.present, "x", "1s", "1s", "1s:1s", self.plan.exact_clock))

    def _rules_grid(self) -> tuple[ReadPlan, list[Series] | None] | None:
        """The rules' first check (:func:`~flopwatch.fleet.rules.rules_grid`): None when they cannot be used (the
        reason goes to :attr:`rules_note`, or raises under ``--rules require``); else the plan to check them over
        (``--rules require`` moves the start onto the rule grid: the window before start) and the samples read
        (None: the start was just moved, so they are on the grid)."""
        import dataclasses

        from flopwatch.fleet.rules import rules_grid

        p = self.plan
        if p.rules == "off":
            return None
        chk, first = rules_grid(
            self.client, p, self.present, self._needed_rules(), self.rule_names or frozenset()
        )
        if chk is None:
            return p, first
        if chk.kind == "grid" and p.rules == "require" and chk.grid_offset_s is not None:
            # Widen the span to the rule grid (the window before start): answers then equal the raw path's
            # over the widened span, which the output's start reports.
            self.plan = dataclasses.replace(p, start=p.start + chk.grid_offset_s - p.window_s)
            self.rules_note = f"span widened to the rule grid: start {self.plan.start:.3f}"
            return self.plan, None
        self._rules_unused(chk.reason)
        return None

    def _rules_unused(self, reason: str) -> None:
        if self.plan.rules == "require":
            raise InputError(f"--rules require: {reason}", field="rules")
        self.rules_note = reason

    def _check_rules(self, p: ReadPlan, first: list[Series] | None) -> None:
        """The rules' coverage at the first and last window (:func:`~flopwatch.fleet.rules.check_rules`) over the
        plan :meth:`_rules_grid` fixed; on success the reader reads rule series from now on."""
        import dataclasses

        from flopwatch.fleet.rules import check_rules

        # first None: the start was just put on the grid, so the rule samples are counted, not read
        chk = check_rules(
            self.client,
            p,
            self.present,
            self._needed_rules(),
            self.rule_names,
            on_grid=first is None,
            first=first,
        )
        if chk.use:
            self.rules_used = True
            self.plan = dataclasses.replace(
                p,
                gpus_per_chunk=max(p.gpus_per_chunk, p.rules_gpus_per_chunk),
                time_chunk_s=max(p.time_chunk_s, p.rules_time_chunk_s),
            )
        else:
            self.rules_note = ""
            self._rules_unused(chk.reason)

    def chunks(self, keys: Sequence[str], label: str) -> list[str]:
        """Matchers of each GPU chunk (the user's matchers plus a regex on ``label``)."""
        if not label:
            return [self.plan.matchers]
        out = []
        n = self.plan.gpus_per_chunk
        for i in range(0, len(keys), n):
            alt = "|".join(_re_escape(k) for k in keys[i : i + n])
            mm = f'{label}=~"{alt}"'
            out.append(f"{self.plan.matchers},{mm}" if self.plan.matchers else mm)
        return out

    def time_chunks(self) -> list[tuple[float, float]]:
        """[(t0, t1)] covering [start, end] in whole windows (the last window may end after ``end``)."""
        p = self.plan
        W = p.window_s
        n_win = max(1, math.ceil((p.end - p.start) / W - 1e-9))
        per = max(1, min(int(p.time_chunk_s // W) or 1, MAX_POINTS_PER_SERIES - 1))
        out = []
        for k in range(0, n_win, per):
            t0 = p.start + k * W
            t1 = p.start + min(n_win, k + per) * W
            out.append((t0, t1))
        return out

    def blocks(self, matchers: str, on_query: Callable[[], None] | None = None) -> Iterator[WindowBlock]:
        """Window aggregates of one GPU chunk, one time chunk at a time."""
        p = self.plan
        closed = self.client.version() < (3, 0)
        W = _ms_range(p.window_s, closed)
        s = _ms_range(p.step_s, closed)
        R_sub = f"{W}:{int(round(p.step_s * 1000))}ms"
        queries = _queries(self.present, matchers, W, s, R_sub, p.exact_clock)
        if self.rules_used:
            queries = self._rule_queries(queries, matchers, W)
        # Asked only where needed (see _on_demand): resets() where the counter decreased inside a window, and the
        # counter's sample count where power has none (dcgm-exporter exports every field at each scrape, so
        # elsewhere it is the power's). Each saves one pass over the counter's samples per chunk.
        lazy = {k: queries.pop(k) for k in ("e_resets",) if k in queries}
        if M.POWER in self.present and "e_n" in queries:
            lazy["e_n"] = queries.pop("e_n")
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, p.concurrency)) as pool:
            for t0, t1 in self.time_chunks():
                # Evaluate at window ends; a window (t − W, t] covers the samples of that window only.
                futs = {
                    name: pool.submit(self.client.query_range, expr, t0 + p.window_s, t1, p.window_s)
                    for name, expr in queries.items()
                }
                results: dict[str, list[Series]] = {}
                for name, f in futs.items():
                    results[name] = f.result()
                    self.n_queries += 1
                    if on_query is not None:
                        on_query()
                block = _assemble(results, t0 + p.window_s, t1, p.window_s, self.present, sums=False)
                self._on_demand(block, lazy, t0 + p.window_s, t1)
                _sums_from_means(block.values)
                yield block

    def _rule_queries(self, queries: Mapping[str, str], matchers: str, W: str) -> dict[str, str]:
        """The same window aggregates from the recording-rule series: one rule sample per series and window."""
        from flopwatch.fleet.rules import reader_rule

        sel = f"{{{matchers}}}" if matchers else ""
        # gauge rules hold window sums (flopwatch.fleet.rules); the window mean is the sum over the count rule
        count = reader_rule("p_n" if M.POWER in self.present else "e_n", self.present, self.plan.window_s)
        out = {}
        for name in queries:
            rule = reader_rule(name, self.present, self.plan.window_s)
            if rule is None:  # check_rules made sure every query has one
                raise AssertionError(name)
            out[name] = f"last_over_time({rule}{sel}[{W}])"
            if name.endswith("_avg"):
                out[name] += f" / last_over_time({count}{sel}[{W}])"
        return out

    def _on_demand(self, block: WindowBlock, lazy: Mapping[str, str], t_first: float, t_last: float) -> None:
        """Fill the counter's ``e_n`` and ``e_resets`` from what was read, asking the server only where needed.

        ``e_n``: the power's sample count where the counter has samples; ``count_over_time`` is asked (this GPU
        chunk and time chunk) only when some window has counter samples but no power samples.

        ``e_resets``: 0 where the counter has samples; ``resets()`` is asked only when some window's maximum
        exceeds its last value (a since-boot counter only rises between resets, so that window held a
        decrease). A reset between two windows (a window's minimum below the previous window's last value) needs
        no count: the accumulator sees it. Not seen: a reset after which the counter climbs back above its
        pre-reset maximum inside the same window, in the first window of a series (a GPU booted less than about
        a window before): its energy then lacks the part before the reset.
        """
        v = block.values
        e_last = v.get("e_last")
        if e_last is None or not lazy:
            return
        has = np.isfinite(e_last)
        need: dict[str, str] = {}
        if "e_n" in lazy:
            p_n = v.get("p_n")
            p_n = np.full_like(e_last, np.nan) if p_n is None else p_n
            with np.errstate(invalid="ignore"):
                ok = p_n > 0
            v["e_n"] = np.where(has & ok, p_n, np.nan)
            if np.any(has & ~ok):
                need["e_n"] = lazy["e_n"]
        if "e_resets" in lazy:
            e_max = v.get("e_max")
            v["e_resets"] = np.where(has, 0.0, np.nan)
            with np.errstate(invalid="ignore"):
                if e_max is not None and np.any(e_max > e_last):
                    need["e_resets"] = lazy["e_resets"]
        for name, expr in need.items():
            series = self.client.query_range(expr, t_first, t_last, self.plan.window_s)
            self.n_queries += 1
            self.n_lazy_queries += 1  # not ticked: progress counts the planned queries
            got = _assemble({name: series}, t_first, t_last, self.plan.window_s, block.present, sums=False)
            rows = {_key(lab): i for i, lab in enumerate(got.labels)}
            g = got.values[name]
            for i, lab in enumerate(block.labels):
                j = rows.get(_key(lab))
                if j is not None:
                    ok = np.isfinite(g[j])
                    v[name][i, ok] = g[j, ok]

    @property
    def n_queries_per_chunk(self) -> int:
        """Queries per (GPU chunk, time chunk), not counting the ones asked on demand (:meth:`_on_demand`)."""
        q = _queries(self.present, "x", "1s", "1s", "1s:1s", self.plan.exact_clock)
        return len(q) - ("e_resets" in q) - ("e_n" in q and M.POWER in self.present)


def _re_escape(v: str) -> str:
    out = []
    for ch in v:
        if ch in ".^$*+?()[]{}|\\":
            out.append("\\\\" + ch)
        elif ch == '"':
            out.append('\\"')
        else:
            out.append(ch)
    return "".join(out)


def _key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Identity of a series across queries: its labels without ``__name__`` (range functions drop it)."""
    if "__name__" in labels:
        return tuple(sorted((k, v) for k, v in labels.items() if k != "__name__"))
    return tuple(sorted(labels.items()))


def _assemble(
    results: Mapping[str, list[Series]],
    t_first: float,
    t_last: float,
    step: float,
    present: frozenset[str],
    *,
    sums: bool = True,
) -> WindowBlock:
    t = np.arange(t_first, t_last + step / 2, step)
    index: dict[tuple[tuple[str, str], ...], int] = {}
    labels: list[Mapping[str, str]] = []
    rows: dict[str, list[int]] = {}
    for name, ss in results.items():
        r = rows[name] = []
        for s in ss:
            k = _key(s.labels)
            i = index.get(k)
            if i is None:
                i = index[k] = len(labels)
                labels.append(dict(k))
            r.append(i)
    n = len(labels)
    values: dict[str, np.ndarray] = {}
    for name, ss in results.items():
        a = np.full((n, len(t)), np.nan)
        if ss:  # one scatter per query: per-series numpy calls cost more than the work on large fleets
            row = np.repeat(np.asarray(rows[name], dtype=np.intp), [len(s.t) for s in ss])
            tt = np.concatenate([s.t for s in ss])
            vv = np.concatenate([s.v for s in ss])
            j = np.rint((tt - t_first) / step).astype(np.intp)
            ok = (j >= 0) & (j < len(t))
            a[row[ok], j[ok]] = vv[ok]
        values[name] = a
    if sums:
        _sums_from_means(values)
    return WindowBlock(t=t, labels=labels, values=values, present=present)


#: Gauges read as window means; their sample count is the power's (else the counter's): dcgm-exporter exports
#: every field at each scrape, and one count query instead of one per gauge saves a pass over the samples.
_GAUGES = ("gr", "gpu_util", "sm", "dram", "clock", "tensor", "fp32", "imma", "dfma", "fp16", "fp64")


def _sums_from_means(values: dict[str, np.ndarray]) -> None:
    ref = values.get("p_n")
    if ref is None:
        ref = values.get("e_n")
    elif "e_n" in values:
        ref = np.fmax(ref, values["e_n"])
    for key in _GAUGES:
        avg = values.pop(f"{key}_avg", None)
        if avg is None or ref is None:
            continue
        ok = np.isfinite(avg) & np.isfinite(ref)
        values[f"{key}_n"] = np.where(ok, ref, np.nan)
        values[f"{key}_sum"] = np.where(ok, avg * ref, np.nan)
