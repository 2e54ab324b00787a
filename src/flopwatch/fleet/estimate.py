"""``estimate_fleet``: read a fleet's dcgm-exporter history chunk by chunk and estimate every group's FLOPs.

Stages (each its own module): :mod:`.reader` (chunked window queries) → :mod:`.aggregate` (per GPU-job sums) →
:mod:`.estimators` (energy and pipe estimates, verdicts) → :class:`FleetResult` (the JSON contract).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from flopwatch.devices import DeviceSpec
from flopwatch.fleet.aggregate import Accumulator, GpuJob
from flopwatch.fleet.estimators import (
    LOW_UTIL_NOTE,
    GpuEstimate,
    device_for,
    disagree,
    estimate_gpu_job,
    estimate_gpu_jobs,
    verdict,
)
from flopwatch.fleet.reader import FleetReader, ReadPlan
from flopwatch.telemetry import dcgm_metrics as M
from flopwatch.telemetry.prom_client import PrometheusClient

FLEET_SCHEMA = "flopwatch.fleet/1"


@dataclass
class FleetResult:
    """Per-group estimates (``groups``, the JSON contract) and how they were obtained (``meta``)."""

    groups: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": FLEET_SCHEMA, "groups": self.groups, **self.meta}


def _iso(t: float) -> str | None:
    if not math.isfinite(t):
        return None
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _infer_dtype(job: GpuJob) -> str:
    """bf16 when the tensor pipe did the work, fp32 when the FP32 pipe did (ties and no data: bf16)."""
    return _dtype_of(job.tensor_a, job.fp32_a)


def _dtype_of(tensor_a: float, fp32_a: float) -> str:
    """:func:`_infer_dtype` on ∫ activity dt of the two pipes (NaN: absent, counts as 0)."""
    t = tensor_a if tensor_a == tensor_a else 0.0
    f = fp32_a if fp32_a == fp32_a else 0.0
    return "fp32" if f > t else "bf16"


#: What a group is missing, shared by the fold one GPU-job at a time (_add_job) and on arrays (_fold_arrays).
MISSING_COUNTER = f"{M.ENERGY} (energy from power)"
MISSING_UTIL = f"{M.GR_ACTIVE}/{M.GPU_UTIL} (no utilisation)"


def _missing_model(name: str | None) -> str:
    return f"modelName (unknown device {name!r}: no estimate; use --device)"


def estimate_fleet(
    client: PrometheusClient,
    plan: ReadPlan,
    *,
    by: str = "pod",
    profile: Any | None = None,
    threshold: float | None = None,
    dtype: str | None = None,
    device: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> FleetResult:
    """Estimate every group's FLOPs over ``plan``'s range (see the module docstring and ``docs/fleet.md``)."""
    from concurrent.futures import ThreadPoolExecutor

    from flopwatch.telemetry.prom_client import PrometheusError

    t0 = time.perf_counter()
    reader = FleetReader(client, plan)

    def setup(p: ReadPlan) -> tuple[tuple[str, ...], tuple[dict[str, str], str] | None]:
        # alongside the rules' checks, once the span is fixed: the group label, and which job-level rules stand in
        # (asked before the checks say whether rules are read at all: then unused)
        by_labels = _resolve_by(client, by, p, reader.present)
        if p.resolution != "span" or p.rules == "off":
            return by_labels, None
        from flopwatch.fleet.joblevel import JobLevel

        try:
            return by_labels, JobLevel.plan_rules(reader, by_labels, p)
        except PrometheusError:
            return by_labels, None  # asked again, and reported, if the rules are read

    present, keys, chunk_label = reader.discover(alongside=setup)
    assert reader.alongside is not None
    by_labels, job_plan = reader.alongside.result()
    plan = reader.plan  # --rules require may widen the span to the rule grid
    span = None
    if plan.resolution == "span":
        import dataclasses

        from flopwatch.fleet.span import SpanReader

        plan = reader.plan = dataclasses.replace(
            plan, gpus_per_chunk=max(plan.gpus_per_chunk, plan.span_gpus_per_chunk)
        )
        span = SpanReader(
            reader, by_labels, uuid_keyed=chunk_label == "UUID", dram=profile is not None, job_plan=job_plan
        )
    chunks = reader.chunks(keys, chunk_label)
    per_chunk = (
        span.n_queries_per_chunk
        if span is not None
        else len(reader.time_chunks()) * reader.n_queries_per_chunk
    )
    total = len(chunks) * per_chunk + (span.n_fleet_queries if span is not None else 0)
    done = [0]

    def tick() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], total)

    warm = _prewarm(client, plan, present, device) if profile is None else None
    groups: dict[str, dict[str, Any]] = {}
    unattributed_j, unattributed_series = 0.0, 0
    regrid_gpus = 0
    pipes: dict[str, dict[str, Any]] | None = None  # job-level rules: group → model → JobPipes
    if span is not None:
        with ThreadPoolExecutor(max_workers=max(1, plan.concurrency)) as pool:
            jobs_q = span.submit_jobs(pool) if span.job_level else None
            idle_q = span.submit_idle(pool)
            # one chunk ahead: the server answers the next chunk while this process folds the current one (memory:
            # two chunks' answers)
            ahead = [span.submit(pool, m) for m in chunks[:2]]
            # before the first fold: the energy estimate takes its dtype from the pipes
            if jobs_q is not None:
                pipes = span.collect_jobs(jobs_q, on_query=tick)
            span.collect_idle(idle_q, on_query=tick)
            # the fleet-wide answers (≈ 15 000 labelled series at 1024 GPUs) are folded: let them go before the chunks
            jobs_q = idle_q = None
            for i in range(len(chunks)):
                got = span.collect(ahead.pop(0), on_query=tick)
                if i + 2 < len(chunks):
                    ahead.append(span.submit(pool, chunks[i + 2]))
                unattributed_j += got.unattributed_j
                unattributed_series += len(got.unattributed_series)
                regrid_gpus += got.regrid_gpus
                _fold_many(groups, got.jobs, present, profile, dtype, device, pipes)
    else:
        for matchers in chunks:
            acc = Accumulator(by_labels, plan.step_s, plan.window_s)
            for block in reader.blocks(matchers, on_query=tick):
                acc.add(block)
            unattributed_j += acc.unattributed_j
            unattributed_series += len(acc.unattributed_series)
            # per chunk: memory stays bounded by the chunk
            _fold_many(groups, acc.finish(), present, profile, dtype, device)
    if warm is not None:
        warm.join()
    missing_metrics = sorted(set(M.METRICS) - set(present))
    simulated = reader.simulated
    out = [
        _close(g, threshold, None if pipes is None else (pipes.get(g["key"], {}), profile, dtype, device))
        for g in sorted(groups.values(), key=lambda g: g["key"])
    ]
    if not out:
        from flopwatch.errors import InputError

        raise InputError(
            f"empty result: no series carries a {'/'.join(by_labels)} label in the range (try --by gpu or "
            f"another label; {unattributed_series} series had none)",
            field="by",
        )
    meta = {
        "prometheus": client.display_url,
        "simulated": simulated,
        "start": _iso(plan.start),
        "end": _iso(plan.end),
        "step_s": plan.step_s,
        "window_s": plan.window_s,
        "by": by,
        "by_labels": list(by_labels),
        "selector": ("{" + plan.matchers + "}") if plan.matchers else None,
        "threshold_flops": threshold,
        "energy_model": (
            f"profile {getattr(profile, 'source', None) or getattr(profile, 'model_name', '?')}"
            if profile is not None
            else "built-in MFU→power model of each device (MASCOTS 2026 lines; not calibrated on this fleet)"
        ),
        "metrics_present": sorted(present),
        "metrics_missing": missing_metrics,
        "unattributed_series": unattributed_series,
        "unattributed_energy_j": unattributed_j,
        "queries": reader.n_queries,
        "read_from": "recording rules" if reader.rules_used else "raw series",
        "resolution": plan.resolution,
        # span resolution: GPUs re-read per window (their energy counter fell, or a series of theirs has a gap)
        "regrid_gpus": regrid_gpus,
        "rules_note": reader.rules_note or None,
        # span resolution on rules: pipes, clock, SM activity and power limit from the job-level rules
        "pipes_from": (
            None
            if span is None or not reader.rules_used
            else ("job-level rules" if pipes is not None else "per GPU")
        ),
        "job_rules_note": (span.job_note or None) if span is not None else None,
        # span resolution: the counter's energy from the rise rule (one series per GPU-job) or its max − min
        "counter_from": (
            None
            if span is None or M.ENERGY not in present
            else ("rise rule" if span.rise_used else "max − min")
        ),
        "bytes_received": client.bytes_received,
        "gpu_hours": sum(g["gpu_hours"] for g in out),
        "elapsed_s": time.perf_counter() - t0,
    }
    return FleetResult(out, meta)


def _prewarm(client: PrometheusClient, plan: ReadPlan, present: frozenset[str], device: str | None) -> Any:
    """Build the built-in power models of the fleet's device models while the queries run (≈ 1 s of pandas)."""
    import threading

    from flopwatch.devices import get_device
    from flopwatch.errors import InputError
    from flopwatch.fleet.powerinv import power_inverse

    ref = M.ENERGY if M.ENERGY in present else M.POWER
    names = [device] if device else client.label_values("modelName", ref, plan.start, plan.end)

    def build() -> None:
        for n in names:
            try:
                key = get_device(n).key
                for d in ("bf16", "fp32"):
                    power_inverse(key, d)
            except InputError:
                continue  # unknown or unsupported model: reported when its GPU-jobs are estimated

    t = threading.Thread(target=build, name="flopwatch-powerinv", daemon=True)
    t.start()
    return t


def _resolve_by(
    client: PrometheusClient, by: str, plan: ReadPlan, present: frozenset[str]
) -> tuple[str, ...]:
    """The group label actually in use: the first candidate with values in the range.

    With ``exported_pod`` present, the plain ``pod`` label is the exporter's own pod (Kubernetes scrape without
    ``honor_labels``) and must not become a group; so only one candidate is kept.
    """
    cands = M.group_labels(by)
    if len(cands) == 1:
        return cands
    ref = M.ENERGY if M.ENERGY in present else M.POWER
    match = f"{ref}{{{plan.matchers}}}" if plan.matchers else ref
    for c in cands:
        if client.label_values(c, match, plan.start, plan.end):
            return (c,)
    return cands


def _job_model(
    job: GpuJob,
    profile: Any | None,
    dtype: str | None,
    device: str | None,
    pipes: dict[str, dict[str, Any]] | None,
) -> tuple[DeviceSpec | None, str, str]:
    """(device spec or None when unknown, dtype to estimate with, dtype the pipes say) of one GPU-job."""
    spec = device_for(job, device)
    if pipes is None:
        inferred = _infer_dtype(job)
    else:
        jp = pipes.get(job.group, {}).get(job.labels.get("modelName", ""))
        inferred = _dtype_of(jp.get("tensor_a"), jp.get("fp32_a")) if jp is not None else "bf16"
    return spec, dtype or (profile.dtype if profile is not None else None) or inferred, inferred


def _fold_many(
    groups: dict[str, dict[str, Any]],
    jobs: list[GpuJob],
    present: frozenset[str],
    profile: Any | None,
    dtype: str | None,
    device: str | None,
    pipes: dict[str, dict[str, Any]] | None = None,
) -> None:
    """:func:`_fold` of a chunk's GPU-jobs, their estimates made per device model and dtype in one batch
    (:func:`~flopwatch.fleet.estimators.estimate_gpu_jobs`). With the job-level pipes and the built-in model (span
    resolution on rules: the fleet-wide sweep), on arrays: :func:`_fold_arrays`."""
    if pipes is not None and profile is None:
        _fold_arrays(groups, jobs, dtype, device, pipes)
        return
    batches: dict[tuple[str, str], list[int]] = {}
    specs: dict[str, DeviceSpec] = {}
    models = [_job_model(job, profile, dtype, device, pipes) for job in jobs]
    for i, (spec, d, _inferred) in enumerate(models):
        if spec is not None:
            specs[spec.key] = spec
            batches.setdefault((spec.key, d), []).append(i)
    ests: list[GpuEstimate | None] = [None] * len(jobs)
    for (key, d), ix in batches.items():
        for i, e in zip(
            ix,
            estimate_gpu_jobs([jobs[i] for i in ix], specs[key], d, profile, pipes=pipes is None),
            strict=True,
        ):
            ests[i] = e
    for job, e, model in zip(jobs, ests, models, strict=True):
        g = groups.get(job.group)
        if g is None:
            g = groups[job.group] = _new_group(job.group)
        _add_job(g, job, present, profile, dtype, device, pipes, e, model)


def _fold_arrays(
    groups: dict[str, dict[str, Any]],
    jobs: list[GpuJob],
    dtype: str | None,
    device: str | None,
    pipes: dict[str, dict[str, Any]],
) -> None:
    """:func:`_add_job` of a chunk's GPU-jobs at once, where the pipes come from the job-level rules and the energy
    estimate from the built-in model: sums per group with ``np.bincount``, the model and dtype once per group and
    device model, the estimates on arrays (:func:`~flopwatch.fleet.estimators.builtin_energy`). The same groups as
    one :func:`_add_job` per GPU-job, to rounding (tests/test_fleet.py)."""
    from flopwatch.fleet.estimators import NO_SAMPLES_NOTE, UNKNOWN_UTIL_NOTE, builtin_energy

    n = len(jobs)
    if n == 0:
        return
    gix: dict[str, int] = {}
    gi = np.empty(n, dtype=np.intp)
    # _job_model once per group and device model: the dtype is the group's (job-level pipes), the spec the model's
    models: dict[tuple[str, str], tuple[DeviceSpec | None, str, str]] = {}
    mix: dict[tuple[str, str], int] = {}
    model_label: dict[tuple[str, str], str | None] = {}
    mi = np.empty(n, dtype=np.intp)
    for i, job in enumerate(jobs):
        gi[i] = gix.setdefault(job.group, len(gix))
        k = (job.group, job.labels.get("modelName", ""))
        m = mix.get(k)
        if m is None:
            m = mix[k] = len(mix)
            models[k] = _job_model(job, None, dtype, device, pipes)
            model_label[k] = job.labels.get("modelName")
        mi[i] = m
    mkeys = list(mix)
    G = len(gix)
    keys = list(gix)
    gs = [groups.get(k) or groups.setdefault(k, _new_group(k)) for k in keys]

    def col(name: str) -> np.ndarray:
        return np.fromiter((getattr(j, name) for j in jobs), float, n)

    def total(x: np.ndarray, sel: np.ndarray | None = None) -> np.ndarray:
        if sel is None:
            return np.bincount(gi, weights=x, minlength=G)
        return np.bincount(gi[sel], weights=x[sel], minlength=G)

    def any_(sel: np.ndarray) -> np.ndarray:
        return np.bincount(gi[sel], minlength=G) > 0

    e, cov, dur = col("energy_j"), col("covered_s"), col("duration_s")
    busy, busy_cov = col("busy_s"), col("busy_covered_s")
    t_first, t_last = col("t_first"), col("t_last")
    start = np.full(G, np.inf)
    np.minimum.at(start, gi, t_first)
    end = np.full(G, -np.inf)
    np.maximum.at(end, gi, t_last)
    sums = {
        "energy_j": total(e),
        "_covered": total(cov),
        "_span": total(dur),
        "_busy": total(busy),
        "_busy_cov": total(busy_cov),
        "_from_power": total(col("energy_from_power_j")),
    }
    resets = np.bincount(gi, weights=col("resets"), minlength=G)
    from_power_only = any_(col("counter_s") <= 0)
    # the energy estimates, per device model and dtype
    spec_of = [models[k][0] for k in mkeys]
    valid = np.fromiter((spec_of[m] is not None for m in mi.tolist()), bool, n)
    est = np.full((3, n), np.nan)
    net = np.full(n, np.nan)
    low = np.zeros(n, bool)
    unknown = np.zeros(n, bool)
    no_samples = np.zeros(n, bool)
    util = np.full(n, np.nan)
    batches: dict[tuple[str, str], list[int]] = {}
    for m, (spec, d, _inferred) in enumerate(models[k] for k in mkeys):
        if spec is not None:
            batches.setdefault((spec.key, d), []).append(m)
    for (_key, d), ms in batches.items():
        ix = np.flatnonzero(np.isin(mi, ms))
        spec = spec_of[ms[0]]
        assert spec is not None
        b = builtin_energy(e[ix], dur[ix], busy[ix], busy_cov[ix], cov[ix], spec, d)
        est[0, ix], est[1, ix], est[2, ix] = b.flops, b.lower, b.upper
        net[ix] = b.net_energy_j
        low[ix] = b.wide & b.known
        unknown[ix] = b.wide & ~b.known
        no_samples[ix] = ~b.ok
        util[ix] = b.util
    fin = np.isfinite(est) & valid
    est_sum = [total(np.where(fin[r], est[r], 0.0)) for r in range(3)]
    est_has = [any_(fin[r]) for r in range(3)]
    net_sum = total(np.where(np.isfinite(net) & valid, net, 0.0))
    n_jobs = np.bincount(gi[valid], minlength=G)
    n_low = np.bincount(gi[low], minlength=G)
    lowest = np.full(G, np.inf)
    np.minimum.at(lowest, gi[low], util[low])
    has_unknown, has_no_samples = any_(unknown), any_(no_samples)
    no_util = any_(valid & (busy_cov <= 0))
    for g, job in zip((gs[x] for x in gi.tolist()), jobs, strict=True):
        g["_gpus"].add(job.gpu)
    for (group, model), (spec, d, _inferred) in models.items():
        g = gs[gix[group]]
        if spec is None:
            name = model_label[(group, model)]
            g["_missing"].add(_missing_model(name))
            g["_incomplete"] = True
        else:
            g["_devices"].add(spec.key)
            g["_dtypes"].add(d)
    for x, g in enumerate(gs):
        g["_start"] = min(g["_start"], float(start[x]))
        g["_end"] = max(g["_end"], float(end[x]))
        for name, v in sums.items():
            g[name] += float(v[x])
        g["resets"] += int(resets[x])
        g["net_energy_j"] += float(net_sum[x])
        for r in range(3):
            if est_has[r][x]:
                old = g["_est"][r]
                g["_est"][r] = float(est_sum[r][x]) if not math.isfinite(old) else old + float(est_sum[r][x])
        g["_jobs"] += int(n_jobs[x])
        if n_low[x]:
            lw = g["_low_util"]
            lw[0] += int(n_low[x])
            lw[1] = min(lw[1], float(lowest[x]))
        if has_unknown[x]:
            g["_notes"].add(UNKNOWN_UTIL_NOTE)
        if has_no_samples[x]:
            g["_notes"].add(NO_SAMPLES_NOTE)
        if from_power_only[x]:
            g["_missing"].add(MISSING_COUNTER)
        if no_util[x]:
            g["_missing"].add(MISSING_UTIL)


def _new_group(key: str) -> dict[str, Any]:
    return {
        "key": key,
        "_gpus": set(),
        "_start": math.inf,
        "_end": -math.inf,
        "energy_j": 0.0,
        "net_energy_j": 0.0,
        "_est": [math.nan] * 6,  # running sums: energy f/lo/hi, pipe f/lo/hi (NaN: nothing finite yet)
        "_incomplete": False,
        "_covered": 0.0,
        "_span": 0.0,
        "_busy": 0.0,
        "_busy_cov": 0.0,
        "_sm": 0.0,
        "_plimit": [],
        "_from_power": 0.0,
        "resets": 0,
        "_missing": set(),
        "_notes": set(),
        "_devices": set(),
        "_dtypes": set(),
        "_low_util": [0, math.inf],  # GPU-jobs below the frontier gate, and the lowest mean utilisation
        "_jobs": 0,
        "_other": {},  # pipes without a peak: ∫ activity dt over the group
    }


def _add_job(
    g: dict[str, Any],
    job: GpuJob,
    present: frozenset[str],
    profile: Any | None,
    dtype: str | None,
    device: str | None,
    pipes: dict[str, dict[str, Any]] | None = None,
    est: GpuEstimate | None = None,
    model: tuple[DeviceSpec | None, str, str] | None = None,
) -> None:
    """Fold one GPU-job into its group. ``pipes`` (job-level rules): the group's pipes, clock, SM activity and
    power limit come from there (:func:`_close`), not from the GPU-job; its dtype too. ``est``, ``model``: its
    estimates and :func:`_job_model`, when already made (:func:`_fold_many`)."""
    g["_gpus"].add(job.gpu)
    g["_start"] = min(g["_start"], job.t_first)
    g["_end"] = max(g["_end"], job.t_last)
    g["energy_j"] += job.energy_j
    g["_covered"] += job.covered_s
    g["_span"] += job.duration_s
    g["_busy"] += job.busy_s
    g["_busy_cov"] += job.busy_covered_s
    if pipes is None:
        g["_sm"] += job.sm_active_s
        if math.isfinite(job.power_limit_w):
            g["_plimit"].append(job.power_limit_w)
    g["_from_power"] += job.energy_from_power_j
    g["resets"] += job.resets
    if job.counter_s <= 0:
        g["_missing"].add(MISSING_COUNTER)
    spec, d, inferred = model or _job_model(job, profile, dtype, device, pipes)
    if spec is None:
        g["_missing"].add(_missing_model(job.labels.get("modelName")))
        g["_incomplete"] = True
        return
    g["_devices"].add(spec.key)
    g["_dtypes"].add(d)
    # job-level rules: the group's pipe estimate comes from them (_close)
    if est is None:
        est = estimate_gpu_job(job, spec, d, profile, pipes=pipes is None)
    if profile is not None and dtype is None and (inferred == "fp32") != (profile.dtype == "fp32"):
        g["_notes"].add(
            f"profile calibrated on {profile.dtype} but the pipes say this job is {inferred}-like: "
            "energy estimate suspect"
        )
    g["net_energy_j"] += est.net_energy_j if math.isfinite(est.net_energy_j) else 0.0
    vals = (
        est.energy_flops,
        est.energy_lower,
        est.energy_upper,
        est.pipe_flops,
        est.pipe_lower,
        est.pipe_upper,
    )
    g["_est"] = [
        _add(a, b) for a, b in zip(g["_est"], vals, strict=True)
    ]  # O(groups) memory, not O(GPU-jobs)
    g["_jobs"] += 1
    notes = set(est.notes)
    if LOW_UTIL_NOTE in notes:  # one note for the group: how many GPU-jobs, and the lowest
        notes.discard(LOW_UTIL_NOTE)
        low = g["_low_util"]
        low[0] += 1
        low[1] = min(low[1], job.busy_s / job.busy_covered_s)
    g["_notes"].update(notes)
    if pipes is None:
        for other, a in job.other_pipes_s.items():
            g["_other"][other] = g["_other"].get(other, 0.0) + a
        if job.tensor_covered_s <= 0 and job.fp32_covered_s <= 0:
            g["_missing"].add("pipe activity (no pipe estimate)")
        if job.clock_covered_s <= 0 and (job.tensor_covered_s > 0 or job.fp32_covered_s > 0):
            g["_missing"].add(f"{M.SM_CLOCK} (pipe peaks at the maximum clock)")
    if job.dram_covered_s <= 0 and profile is not None:
        g["_missing"].add(f"{M.DRAM} (no TB moved)")
    if job.busy_covered_s <= 0:
        g["_missing"].add(MISSING_UTIL)


def _job_pipes(
    g: dict[str, Any], by_model: dict[str, Any], profile: Any | None, dtype: str | None, device: str | None
) -> None:
    """Add a group's pipe estimate, SM activity, power limit and other pipes from the job-level rules: the same
    :func:`~flopwatch.fleet.estimators.pipe_estimate` as per GPU-job, on the group's sums per device model (it is
    linear in them)."""
    from flopwatch.fleet.estimators import PIPE_USEFUL_RANGE, pipe_estimate

    lo_k, hi_k = PIPE_USEFUL_RANGE
    have_pipe = have_clock = False
    for model, jp in sorted(by_model.items()):
        sums = GpuJob(group=g["key"], gpu="", labels={"modelName": model} if model else {})
        for pipe in ("tensor", "fp32"):
            a, af = jp.get(f"{pipe}_a"), jp.get(f"{pipe}_af")
            if math.isfinite(a):
                have_pipe = True
                setattr(sums, f"{pipe}_a", a)
                setattr(sums, f"{pipe}_covered_s", 1.0)  # present: pipe_estimate only asks whether
                if math.isfinite(af):
                    have_clock = True
                    setattr(sums, f"{pipe}_af", af)
        if math.isfinite(jp.get("sm_a")):
            g["_sm"] += jp.get("sm_a")
        g["_plimit"] += [x for x in (jp.get("plimit_min"), jp.get("plimit_max")) if math.isfinite(x)]
        for other in ("imma", "dfma", "fp16", "fp64"):
            if math.isfinite(jp.get(f"{other}_a")):
                g["_other"][other] = g["_other"].get(other, 0.0) + jp.get(f"{other}_a")
        spec = device_for(sums, device)
        if spec is None:
            continue  # _add_job reported the unknown model
        d = dtype or (profile.dtype if profile is not None else None) or _dtype_of(sums.tensor_a, sums.fp32_a)
        p, notes = pipe_estimate(sums, spec, d)
        g["_notes"].update(notes)
        g["_est"][3:6] = [_add(x, y) for x, y in zip(g["_est"][3:6], (p, p * lo_k, p * hi_k), strict=True)]
    if not have_pipe:
        g["_missing"].add("pipe activity (no pipe estimate)")
    elif not have_clock:
        g["_missing"].add(f"{M.SM_CLOCK} (pipe peaks at the maximum clock)")


def _close(
    g: dict[str, Any], threshold: float | None, job_level: tuple[Any, ...] | None = None
) -> dict[str, Any]:
    """The group's output row. ``job_level``: (its job-level pipes by model, profile, dtype, device)."""
    if job_level is not None:
        _job_pipes(g, *job_level)
    f, lo, hi, p, plo, phi = g.pop("_est")
    if g.pop("_incomplete"):  # a GPU of the group had no usable device model: no energy total
        f = lo = hi = math.nan
    covered, span = g.pop("_covered"), g.pop("_span")
    (n_low, lowest), n_jobs = g.pop("_low_util"), g.pop("_jobs")
    if n_low:
        from flopwatch.fleet.estimators import MIN_UTIL

        g["_notes"].add(
            f"mean utilisation < {MIN_UTIL:.0%} on {n_low} of {n_jobs} GPU-jobs (lowest {lowest:.0%}): outside "
            "the energy model's regime, bounds widened to [0, ceiling]"
        )
    for other, a in sorted(g.pop("_other").items()):
        if a > 0:
            g["_notes"].add(
                f"{other} pipe active {a / max(covered, 1e-9):.1%} of the GPU time: not counted (no peak)"
            )
    busy, busy_cov = g.pop("_busy"), g.pop("_busy_cov")
    sm, plimit = g.pop("_sm"), g.pop("_plimit")
    flags = []
    dis = disagree(lo, hi, plo, phi)
    if dis:
        flags.append("energy and pipe estimates disagree beyond their bounds")
    out = {
        "key": g["key"],
        "gpus": len(g.pop("_gpus")),
        "start": _iso(g.pop("_start")),
        "end": _iso(g.pop("_end")),
        "energy_j": g["energy_j"],
        "net_energy_j": g["net_energy_j"],
        "estimate_flops": _nan_none(f),
        "lower_flops": _nan_none(lo),
        "upper_flops": _nan_none(hi),
        "pipe_estimate_flops": _nan_none(p),
        "pipe_lower_flops": _nan_none(plo),
        "pipe_upper_flops": _nan_none(phi),
        "verdict": verdict(lo, hi, threshold),
        "pipe_verdict": verdict(plo, phi, threshold),
        "disagree": dis,
        "coverage": min(1.0, covered / span) if span > 0 else 0.0,
        "missing": sorted(g.pop("_missing")),
        "gpu_hours": covered / 3600.0,
        "mean_util": (busy / busy_cov) if busy_cov > 0 else None,
        "mean_sm_active": (sm / busy_cov) if busy_cov > 0 and sm > 0 else None,
        "power_limit_w": [min(plimit), max(plimit)] if plimit else None,
        "energy_from_power_j": g.pop("_from_power"),
        "counter_resets": g.pop("resets"),
        "devices": sorted(g.pop("_devices")),
        "dtypes": sorted(g.pop("_dtypes")),
        "flags": flags,
        "notes": sorted(g.pop("_notes")),
    }
    return out


def _add(a: float, b: float) -> float:
    """Sum that skips NaN terms (a GPU-job an estimator could not handle) but stays NaN if all are NaN."""
    if not math.isfinite(b):
        return a
    return b if not math.isfinite(a) else a + b


def _nan_none(x: float) -> float | None:
    return x if math.isfinite(x) else None
