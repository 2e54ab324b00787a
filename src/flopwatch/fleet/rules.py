"""Recording rules that pre-aggregate dcgm-exporter series per GPU and window, and their detection by the reader.

Reading raw samples costs Prometheus one pass over every sample of every metric the estimators use (about
ten metrics × 240 samples per GPU-hour at a 15 s scrape). Recording rules (Prometheus docs, "Recording rules";
naming ``level:metric:operations``) move that pass to ingest time: a rule group evaluated once per window
writes, per series (all labels kept: GPU and job), exactly the window aggregates the reader would otherwise ask
for (``last``/``min``/``max``/``resets``/``count`` of the energy counter, ``sum``/``count`` of power, ``sum`` of
each activity gauge and the SM clock, ``max`` of the power limit). The reader then reads one sample per series
and window instead of 240. Gauges are recorded as sums, not means, so that totals over many windows
(``--resolution span``, :mod:`flopwatch.fleet.span`) are one ``sum_over_time`` of the rule series; the window
reader divides by the power's count rule to get the window mean.

The rule ranges follow the reader's (:mod:`flopwatch.fleet.reader`): on Prometheus 2.x a range includes both
ends, so windows are ``W − 1 ms`` to tile time without counting a sample twice; on 3.x ranges are left-open and
``W`` tiles exactly. A rule sample at time t then stands for the window (t − W, t].

The same group records job-level sums (:data:`JOB_RULES`: pipes × clock, SM activity, power limit, per job and
node) and GPU-level counter falls (:data:`GPU_RULES`), which span resolution reads instead of one series per
GPU-job where they can stand in (:meth:`flopwatch.fleet.joblevel.JobLevel.plan_rules`); and per series the counter's rise
(:data:`SERIES_RULES`), one series read instead of two for its energy.

The reader uses the rule series only when they match its plan exactly: the same window, every rule it needs
present, the same series count as the raw metric at the first and last window, and rule samples on the
reader's window grid (``start + k·W``; ``promtool tsdb create-blocks-from rules --start START`` evaluates on
that grid, a live rule group at its own offset within the interval, which ``rules_grid`` reports).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flopwatch.errors import InputError
from flopwatch.telemetry import dcgm_metrics as M

if TYPE_CHECKING:
    from flopwatch.fleet.reader import ReadPlan
    from flopwatch.telemetry.prom_client import PrometheusClient, Series

#: Prefix of every flopwatch rule (the ``level`` part of ``level:metric:operations``).
LEVEL = "flopwatch"
#: Prefix of the job-level rules: summed over a job's GPUs (:data:`JOB_RULE_LABELS` kept, the GPU's dropped).
JOB_LEVEL = "flopwatch_job"
#: Labels the job-level rules keep: the job labels :data:`~flopwatch.telemetry.dcgm_metrics.GROUP_LABELS` knows
#: (groups for ``--by pod|job``; ``--selector`` may match on any of these), the host, and the device model (the
#: pipes' peaks are per model). With the host a series is per job and node: a 256-GPU job on 32 eight-GPU nodes is
#: 32 series instead of 256.
JOB_RULE_LABELS: tuple[str, ...] = (
    "pod",
    "namespace",
    "exported_pod",
    "exported_namespace",
    "hpc_job",
    "Hostname",
    "instance",
    "exported_instance",
    "modelName",
)

#: Reader query name → (metric, PromQL range function, operation name in the rule).
RULE_QUERIES: Mapping[str, tuple[str, str, str]] = {
    "e_last": (M.ENERGY, "last_over_time", "last"),
    "e_first": (M.ENERGY, "min_over_time", "min"),
    "e_max": (M.ENERGY, "max_over_time", "max"),
    "e_resets": (M.ENERGY, "resets", "resets"),
    "e_n": (M.ENERGY, "count_over_time", "count"),
    "p_sum": (M.POWER, "sum_over_time", "sum"),
    "p_n": (M.POWER, "count_over_time", "count"),
    "gr_avg": (M.GR_ACTIVE, "sum_over_time", "sum"),
    "gpu_util_avg": (M.GPU_UTIL, "sum_over_time", "sum"),
    "sm_avg": (M.SM_ACTIVE, "sum_over_time", "sum"),
    "dram_avg": (M.DRAM, "sum_over_time", "sum"),
    "clock_avg": (M.SM_CLOCK, "sum_over_time", "sum"),
    "imma_avg": (M.IMMA, "sum_over_time", "sum"),
    "dfma_avg": (M.DFMA, "sum_over_time", "sum"),
    "fp16_avg": (M.FP16, "sum_over_time", "sum"),
    "fp64_avg": (M.FP64, "sum_over_time", "sum"),
    "plimit": (M.POWER_LIMIT, "max_over_time", "max"),
    # the tensor pipe: the reader asks HMMA where present, else TENSOR_ACTIVE (both have rules)
    "tensor_avg": (M.TENSOR, "sum_over_time", "sum"),
    "tensor_hmma_avg": (M.HMMA, "sum_over_time", "sum"),
    "fp32_avg": (M.FP32, "sum_over_time", "sum"),
}


#: Per-series rules that are not a single range function (reader name → (metric, operation, PromQL template);
#: ``{a}``: the window's range selector, ``{W}``: the window). ``e_rise``: the counter's rise since the previous
#: window's maximum, or within the window when the series had no sample in the previous one. Summed over a series'
#: windows it telescopes to its last value − its first (when its windows are contiguous and the counter does not
#: fall), so ``--resolution span`` reads the counter's energy from one series per GPU-job instead of two
#: (``max`` and ``min``): :mod:`flopwatch.fleet.span`.
SERIES_RULES: Mapping[str, tuple[str, str, str]] = {
    "e_rise": (
        M.ENERGY,
        "rise",
        "(max_over_time({a}) - max_over_time({a} offset {W})) or (max_over_time({a}) - min_over_time({a}))",
    ),
}

#: Job-level rules (reader name → (metric, operation, PromQL template)): what the estimators only ever use summed
#: over a job's GPUs. The pipe estimator is linear in Σ activity × clock (:mod:`flopwatch.fleet.estimators`), so
#: its per-window products summed over a job's GPUs give the job's pipe FLOPs exactly as the window reader's
#: per-GPU sums do; SM activity, the pipes without a peak and the power limit are reported per job only. With these,
#: ``--resolution span`` reads per GPU only what the energy estimator needs (≈ half the per-GPU queries, the cost
#: that grows with the fleet: benchmarks/bench_fleet.py). ``{a}``/``{c}``: the activity and clock range selectors.
JOB_RULES: Mapping[str, tuple[str, str, str]] = {
    "tensor_af": (M.TENSOR, "sum_x_clock", "sum by ({by}) (sum_over_time({a}) * avg_over_time({c}))"),
    "tensor_hmma_af": (M.HMMA, "sum_x_clock", "sum by ({by}) (sum_over_time({a}) * avg_over_time({c}))"),
    "fp32_af": (M.FP32, "sum_x_clock", "sum by ({by}) (sum_over_time({a}) * avg_over_time({c}))"),
    "tensor_a": (M.TENSOR, "sum", "sum by ({by}) (sum_over_time({a}))"),
    "tensor_hmma_a": (M.HMMA, "sum", "sum by ({by}) (sum_over_time({a}))"),
    "fp32_a": (M.FP32, "sum", "sum by ({by}) (sum_over_time({a}))"),
    "sm_a": (M.SM_ACTIVE, "sum", "sum by ({by}) (sum_over_time({a}))"),
    "imma_a": (M.IMMA, "sum", "sum by ({by}) (sum_over_time({a}))"),
    "dfma_a": (M.DFMA, "sum", "sum by ({by}) (sum_over_time({a}))"),
    "fp16_a": (M.FP16, "sum", "sum by ({by}) (sum_over_time({a}))"),
    "fp64_a": (M.FP64, "sum", "sum by ({by}) (sum_over_time({a}))"),
    "plimit_max": (M.POWER_LIMIT, "max", "max by ({by}) (max_over_time({a}))"),
    "plimit_min": (M.POWER_LIMIT, "min_max", "min by ({by}) (max_over_time({a}))"),
}


#: Prefix of the GPU-level rules: one series per physical GPU (its energy counter), whatever job it ran.
GPU_LEVEL = "flopwatch_gpu"
#: Labels the GPU-level rules keep: what identifies a GPU (:func:`~flopwatch.telemetry.dcgm_metrics.gpu_id`).
GPU_RULE_LABELS: tuple[str, ...] = ("UUID", "Hostname", "instance", "exported_instance", "gpu")
#: GPU-level rules: did the GPU's energy counter fall? Within a window (``resets``), or between windows (the
#: per-window maximum falls: ``resets()`` of this series over the range). Span resolution re-reads such GPUs per
#: window; asking it of one series per GPU instead of one per GPU-job and query saves two per-GPU-job queries.
GPU_RULES: Mapping[str, tuple[str, str, str]] = {
    "gpu_resets": (M.ENERGY, "resets", "sum by ({by}) (resets({a}))"),
    "gpu_max": (M.ENERGY, "max", "max by ({by}) (max_over_time({a}))"),
}


def job_rule_name(metric: str, op: str, window_s: float, level: str = JOB_LEVEL) -> str:
    """``flopwatch_job:DCGM_FI_PROF_PIPE_TENSOR_ACTIVE:sum_x_clock1h``."""
    return f"{level}:{metric}:{op}{window_suffix(window_s)}"


def job_rules(
    window_s: float = 3600.0, prometheus_major: int = 3, selector: str = ""
) -> list[tuple[str, str]]:
    """[(record name, PromQL)] of the job-level rules. ``selector``: label matchers (without braces)."""
    rng = range_ms(window_s, prometheus_major)

    def sel(metric: str) -> str:
        return f"{metric}{{{selector}}}[{rng}]" if selector else f"{metric}[{rng}]"

    out: dict[str, str] = {}
    for metric, op, template in JOB_RULES.values():
        expr = template.format(by=", ".join(JOB_RULE_LABELS), a=sel(metric), c=sel(M.SM_CLOCK))
        out.setdefault(job_rule_name(metric, op, window_s), expr)
    for metric, op, template in GPU_RULES.values():
        expr = template.format(by=", ".join(GPU_RULE_LABELS), a=sel(metric))
        out.setdefault(job_rule_name(metric, op, window_s, GPU_LEVEL), expr)
    return list(out.items())


def reader_job_rule(query: str, present: frozenset[str], window_s: float) -> str | None:
    """Job-level rule series standing for ``query`` (``tensor_af`` … of :data:`JOB_RULES`); None when its metrics
    are absent (the tensor pipe: HMMA where present, as the per-GPU reader)."""
    if query in ("tensor_af", "tensor_a") and M.HMMA in present:
        query = query.replace("tensor", "tensor_hmma")
    spec = JOB_RULES.get(query) or GPU_RULES.get(query)
    if spec is None:
        return None
    metric, op, _t = spec
    if metric not in present or (query.endswith("_af") and M.SM_CLOCK not in present):
        return None
    return job_rule_name(metric, op, window_s, GPU_LEVEL if query in GPU_RULES else JOB_LEVEL)


def window_suffix(window_s: float) -> str:
    """``3600`` → ``1h``, ``1800`` → ``30m``, ``90`` → ``90s`` (the suffix of the rule names)."""
    s = int(round(window_s))
    if s <= 0 or abs(s - window_s) > 1e-9:
        raise InputError(f"rule window must be a whole number of seconds, got {window_s:g}", field="window")
    if s % 3600 == 0:
        return f"{s // 3600}h"
    if s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"


def rule_name(metric: str, op: str, window_s: float) -> str:
    """``flopwatch:DCGM_FI_DEV_POWER_USAGE:sum1h``."""
    return f"{LEVEL}:{metric}:{op}{window_suffix(window_s)}"


def range_ms(window_s: float, prometheus_major: int) -> str:
    ms = int(round(window_s * 1000))
    return f"{ms - 1 if prometheus_major < 3 else ms}ms"


def rules(window_s: float = 3600.0, prometheus_major: int = 3, selector: str = "") -> list[tuple[str, str]]:
    """[(record name, PromQL)] of the per-series rules, one per distinct (metric, operation). ``selector``: label
    matchers (without braces) limiting them."""
    rng = range_ms(window_s, prometheus_major)
    out: dict[str, str] = {}
    for metric, fn, op in RULE_QUERIES.values():
        sel = f"{metric}{{{selector}}}" if selector else metric
        out.setdefault(rule_name(metric, op, window_s), f"{fn}({sel}[{rng}])")
    for metric, op, template in SERIES_RULES.values():
        sel = f"{metric}{{{selector}}}" if selector else metric
        out[rule_name(metric, op, window_s)] = template.format(a=f"{sel}[{rng}]", W=window_suffix(window_s))
    return list(out.items())


def rules_yaml(window_s: float = 3600.0, prometheus_major: int = 3, selector: str = "") -> str:
    """The Prometheus rules file (YAML). ``selector``: label matchers (without braces) limiting the rules."""
    if prometheus_major not in (2, 3):
        raise InputError(
            f"Prometheus major version must be 2 or 3, got {prometheus_major}", field="prometheus"
        )
    suffix = window_suffix(window_s)
    lines = [
        f"# flopwatch recording rules: per-series {suffix} window aggregates of the dcgm-exporter metrics the",
        "# fleet estimators read (`flopwatch fleet estimate --rules auto`). Generated by `flopwatch fleet rules`.",
        f"# Ranges for Prometheus {prometheus_major}.x "
        + ("(closed ranges: window - 1 ms)." if prometheus_major < 3 else "(left-open ranges)."),
        "# flopwatch:… rules keep every label of the source series (UUID, gpu, Hostname, modelName, pod ...);",
        f"# flopwatch_job:… rules sum over a job's GPUs, keeping {', '.join(JOB_RULE_LABELS)};",
        f"# flopwatch_gpu:… rules, one series per GPU, keep {', '.join(GPU_RULE_LABELS)}.",
        "groups:",
        f"  - name: flopwatch-dcgm-{suffix}",
        f"    interval: {suffix}",
        "    rules:",
    ]
    # one group, one interval: the job-level samples fall on the same window grid as the per-series ones
    for name, expr in rules(window_s, prometheus_major, selector) + job_rules(
        window_s, prometheus_major, selector
    ):
        lines += [f"      - record: {name}", f"        expr: {expr}"]
    return "\n".join(lines) + "\n"


def reader_rule(query: str, present: frozenset[str], window_s: float) -> str | None:
    """Rule series standing for reader query ``query`` (None: no rule, e.g. the exact-clock subqueries)."""
    if query == "tensor_avg" and M.HMMA in present:
        query = "tensor_hmma_avg"
    spec = RULE_QUERIES.get(query)
    if spec is not None:
        return rule_name(spec[0], spec[2], window_s)
    series = SERIES_RULES.get(query)
    if series is not None and series[0] in present:
        return rule_name(series[0], series[1], window_s)
    return None


@dataclass(frozen=True)
class RulesCheck:
    """Outcome of :func:`check_rules`: ``use`` or why not (``reason``), and the rule grid offset if known."""

    use: bool
    reason: str = ""
    kind: str = ""  # why not: "missing" | "grid" | "coverage"
    grid_offset_s: float | None = None  # rule sample times − start, mod the window (0: on the reader's grid)


def rule_names(client: PrometheusClient, window_s: float, start: float, end: float) -> frozenset[str]:
    """Every flopwatch rule name of window ``window_s`` (all levels) with series in [start, end] (series index
    only: one cheap call, shared by the checks; whether the rules cover the selection is checked on samples)."""
    suffix = window_suffix(window_s)
    match = f'{{__name__=~"({LEVEL}|{JOB_LEVEL}|{GPU_LEVEL}):DCGM_FI_.*:[a-z_]+{suffix}"}}'
    return frozenset(client.label_values("__name__", match, start, end))


def _off_grid(samples: list[Series], start: float, W: float) -> RulesCheck | None:
    """Why the rule samples cannot be used (not on the reader's grid ``start + k·W``), or None."""
    for x in samples:
        for ts in x.t:
            off = round(((float(ts) - start) % W) * 1000) / 1000
            if off not in (0.0, W):
                return RulesCheck(
                    False,
                    f"rule samples are {off:g} s past the reader's window grid (start + k·{W:g} s): pass "
                    f"--start {start + off - W:.3f} (on the rule grid) or --rules require (which widens the "
                    "span to the grid) to use them",
                    "grid",
                    off,
                )
    return None


def _wanted(
    present: frozenset[str], needed: list[str], have: frozenset[str], W: float
) -> tuple[dict[str, str | None], RulesCheck | None]:
    """The rule series of each needed query name, and why they cannot be used when some do not exist."""
    want = {q: reader_rule(q, present, W) for q in needed}
    lacking = sorted(str(r) for r in want.values() if r is None or r not in have)
    if not lacking:
        return want, None
    why = f"rule series missing for this window ({window_suffix(W)}): {', '.join(lacking[:4])}"
    return want, RulesCheck(False, why, "missing")


def rules_grid(
    client: PrometheusClient,
    plan: ReadPlan,
    present: frozenset[str],
    needed: list[str],
    have: frozenset[str],
) -> tuple[RulesCheck | None, list[Series]]:
    """The first stage of :func:`check_rules`, alone: every needed rule exists, and the reference rule's samples
    at the first window end lie on the reader's grid. (Why not, or None; those samples, for ``check_rules``'s
    ``first``.) A caller that may move the start onto the grid learns it after one query."""
    W = plan.window_s
    want, lacking = _wanted(present, needed, have, W)
    if lacking is not None:
        return lacking, []
    rule_ref = want["e_last"] if M.ENERGY in present else want["p_sum"]
    sel = f"{{{plan.matchers}}}" if plan.matchers else ""
    first = client.query_matrix(f"{rule_ref}{sel}[{range_ms(W, client.version()[0])}]", plan.start + W)
    return _off_grid(first, plan.start, W), first


def check_rules(
    client: PrometheusClient,
    plan: ReadPlan,
    present: frozenset[str],
    needed: list[str],
    have: frozenset[str] | None = None,
    *,
    on_grid: bool = False,
    first: list[Series] | None = None,
) -> RulesCheck:
    """Cheap checks that the rule series can stand for the raw ones over ``plan`` (a few instant queries).

    ``needed``: the reader's query names. Checked: every needed rule exists in the range (series index only;
    ``have``: :func:`rule_names` when already asked); at the first and last window end, the reference rule has a
    sample for every series the raw metric has; every such sample lies on the reader's grid ``start + k·W``
    (``on_grid``: already known, e.g. the start was just moved onto it: the rule samples are counted, not read).
    ``first``: the reference rule's samples at the first window end, already read by :func:`rules_grid`.
    """
    W = plan.window_s
    start, end = plan.start, plan.end
    m = plan.matchers
    if have is None:
        have = rule_names(client, W, start, end + W)
    want, lacking = _wanted(present, needed, have, W)
    if lacking is not None:
        return lacking
    raw_ref = M.ENERGY if M.ENERGY in present else M.POWER
    rule_ref = want["e_last"] if M.ENERGY in present else want["p_sum"]
    major = client.version()[0]
    rng = range_ms(W, major)
    sel = f"{{{m}}}" if m else ""
    n_win = max(1, math.ceil((end - start) / W - 1e-9))
    offset: float | None = None
    ts_ = sorted({start + W, start + n_win * W})
    from concurrent.futures import ThreadPoolExecutor

    matrix = f"{rule_ref}{sel}[{rng}]"
    if on_grid:
        first = None
    elif first is None:
        # the grid first, alone: off it (a start not on the rule group's offset, the usual case) nothing else
        # needs asking before the caller moves the start (then on_grid)
        first = client.query_matrix(matrix, ts_[0])
        off_grid = _off_grid(first, start, W)
        if off_grid is not None:
            return off_grid
    # the rest at once: these round trips are on the estimate's critical path, before any chunk is read
    counted = f"count(last_over_time({rule_ref}{sel}[{rng}]))"
    with ThreadPoolExecutor(max_workers=2 * len(ts_)) as pool:
        asked = [
            (
                t,
                None
                if (first is not None and t == ts_[0])
                else pool.submit(
                    client.query if on_grid else client.query_matrix, counted if on_grid else matrix, t
                ),
                pool.submit(client.query, f"count(last_over_time({raw_ref}{sel}[{rng}]))", t),
            )
            for t in ts_
        ]
    for t, f_samples, f_raw in asked:
        samples, raw = (first if f_samples is None else f_samples.result()), f_raw.result()
        n_raw = int(raw[0].v[0]) if raw else 0
        if on_grid:
            n_rule = int(samples[0].v[0]) if samples else 0
            if n_rule < n_raw:
                return RulesCheck(
                    False,
                    f"rule series do not cover the span: {n_rule} of {n_raw} series have a {rule_ref} sample in "
                    f"the window ending {t:.0f}",
                    "coverage",
                    0.0,
                )
            continue
        off_grid = _off_grid(samples, start, W)
        if off_grid is not None:
            return off_grid
        if any(len(x.t) for x in samples):
            offset = 0.0
        if len(samples) < n_raw:
            return RulesCheck(
                False,
                f"rule series do not cover the span: {len(samples)} of {n_raw} series have a {rule_ref} sample in "
                f"the window ending {t:.0f}",
                "coverage",
                offset,
            )
    return RulesCheck(True, "", offset)
