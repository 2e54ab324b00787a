"""``estimate_fleet``: a fleet's dcgm-exporter history → every group's FLOPs, bounds and verdict. It calls the
stages in order (the package docstring, docs/fleet.md) and returns :class:`FleetResult` (the JSON contract).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flopwatch.errors import InputError
from flopwatch.fleet import calibrate as C
from flopwatch.fleet import groups as G
from flopwatch.fleet.plan import ReadPlan, chunking
from flopwatch.fleet.reader import Discovery, FleetReader, JobMap, discover, first_label
from flopwatch.telemetry import dcgm_metrics as M
from flopwatch.telemetry.prom_answer import gc_paused
from flopwatch.telemetry.prom_client import PrometheusClient

FLEET_SCHEMA = "flopwatch.fleet/2"
#: ``--by`` values that group GPUs by what they did, not by labels.
COHORT = "cohort"
#: Groups assessed together (estimate.verdict.assess_many); a waiting one holds its frame: memory stays flat
JUDGE_BATCH = 2048


@dataclass
class FleetResult:
    """Per-group rows (``groups``), the fleet-wide total (``fleet``) and how they were obtained (``meta``)."""

    groups: list[dict[str, Any]]
    fleet: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": FLEET_SCHEMA, "groups": self.groups, "fleet": self.fleet, **self.meta}


def _resolve_by(client: PrometheusClient, by: str, plan: ReadPlan, found: Discovery) -> tuple[str, ...]:
    """The group label in use: the first candidate with values in the range (with ``exported_pod`` present, the
    plain ``pod`` is the exporter's own pod and must not become a group)."""
    cands = M.GROUP_LABELS.get(by, (by,))  # a known key, or any label name
    label = first_label(client, plan, found.ref_match, *cands)[0] if len(cands) > 1 else ""
    return (label,) if label else cands


def estimate_fleet(
    client: PrometheusClient,
    plan: ReadPlan,
    *,
    by: str = "pod",
    jobs: JobMap | None = None,
    profile: Any | None = None,
    threshold: float | None = None,
    confidence: float | None = None,
    dtype: str | None = None,
    device: str | None = None,
    pipe_calibration: bool = True,
    verifier_operated: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> FleetResult:
    """Every group's FLOPs over ``plan``'s range, and the fleet-wide total (docs/fleet.md). Without
    ``verifier_operated`` every group carries :data:`.groups.OPERATOR_SERIES` ("Whose series")."""
    t0, c0 = time.perf_counter(), time.process_time()
    plan = plan.check()
    found = discover(client, plan)
    cut = chunking(plan, len(found.keys), max((len(k) for k in found.keys), default=1) + 4)
    by_labels = () if by == COHORT or jobs is not None else _resolve_by(client, by, plan, found)
    skip = frozenset() if profile is not None else frozenset({"dram"})
    reader = FleetReader(client, plan, found, cut, by_labels=by_labels, jobs=jobs, skip=skip)
    chunks = reader.matchers()
    per_chunk = len(reader.queries("x")) * len(cut.time_chunks(plan))  # the job-info query among them
    total, done = len(chunks) * per_chunk, itertools.count(1)
    tick = None if progress is None else lambda: progress(next(done), total)
    # each GPU chunk is folded into partial group tables as it arrives and dropped: memory stays flat as the
    # fleet grows (chunks share no GPU)
    what = "job" if jobs is not None else ("/".join(by_labels) or by)
    no_job = f"(no {what})"  # the total covers the series --selector matches: its key says so (r. 12, selector-total)
    everyone = "(all GPUs" + (f" matching {{{plan.matchers}}})" if plan.matchers else ")")
    parts: list[G.GroupTable] = []
    whole: list[G.GroupTable] = []
    n_unlab = 0

    def add(table: G.GpuJobs, keys: np.ndarray) -> None:  # one table's groups and its share of the total
        specs, unknown, impossible = G.devices_of(table, device)
        est = G.estimates(table, specs, dtype)
        parts.append(G.fold(table, keys, specs, est, unknown, impossible))
        whole.append(G.fold(table, np.full(len(table), everyone, dtype=object), specs, est, unknown, impossible))  # fmt: skip

    # the collector paused while chunks are folded and groups judged: both build many acyclic containers, each able
    # to trigger a collection that walks every live object (gc_paused; reference counting frees them)
    with ThreadPoolExecutor(max_workers=max(1, plan.concurrency)) as pool, gc_paused():
        for m in chunks:
            table = reader.read(m, pool, tick)
            no = np.array([j is None for j in table.job])
            n_unlab += int(no.sum()) if by != COHORT else 0
            if len(table):
                add(table, table.cohort if by == COHORT else np.where(no, no_job, table.job))
            del table
    if not parts:
        raise InputError("no samples in the range for the selected series", field="selector")
    if jobs is not None and by != COHORT:  # held time no series reports: unobserved, never dropped (r. 13)
        seen = G.merge(parts)
        if len(
            t := reader.unseen(dict(zip(seen.key.tolist(), seen.sums["duration_s"].tolist(), strict=True)))
        ):
            add(t, t.job)
    # answers the client took with samples left out (non-numeric, stale, impossible timestamps): named everywhere
    degraded = list(getattr(client, "degradations", ()) or ())
    extra = [f"Prometheus answers degraded ({len(degraded)}): " + "; ".join(degraded[:3])] if degraded else []
    if not verifier_operated:
        extra.append(G.OPERATOR_SERIES)
    kw = dict(present=found.present, profile=profile, threshold=threshold, confidence=confidence)
    with gc_paused():
        groups = _judge_all(G.merge(parts), None if by == COHORT else no_job, extra, **kw)
        fleet = _judge_all(G.merge(whole), None, extra, **kw)[0]
    cal = C.calibrate(groups, plan.window_s) if pipe_calibration else None
    if cal is not None:  # beside each verdict, never in it (fleet/calibrate.py)
        C.apply([*groups, fleet], cal)
    meta = {
        "prometheus": client.display_url,
        "series_from": "the verifier's own Prometheus" if verifier_operated else "the operator's Prometheus",
        "simulated": found.simulated,
        "start": G._iso(plan.start),
        "end": G._iso(plan.end),
        "step_s": plan.step_s,
        "window_s": plan.window_s,
        "by": by,
        "by_labels": list(by_labels),
        "jobs_from": ("info series " + jobs.metric if jobs.metric else "mapping file") if jobs else "labels",
        "selector": ("{" + plan.matchers + "}") if plan.matchers else None,
        "threshold_flops": threshold,
        "energy_model": (
            f"profile {getattr(profile, 'source', None) or getattr(profile, 'model_name', '?')}"
            if profile is not None
            else "built-in MFU→power model of each device (MASCOTS 2026 lines; not calibrated on this fleet)"
        ),
        "pipe_calibration": cal,
        "metrics_present": sorted(found.present),
        "metrics_missing": sorted(set(M.METRICS) - set(found.present) - {M.GPU_TEMP}),
        "unlabelled_gpu_jobs": n_unlab,
        "gpus_per_chunk": cut.gpus_per_chunk,
        "windows_per_chunk": cut.windows_per_chunk,
        "max_samples_per_query": cut.samples_per_query,
        "queries": reader.n_queries,
        "degradations": degraded,
        "bytes_received": client.bytes_received,
        "gpu_hours": fleet["gpu_hours"],
        "elapsed_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
    }
    return FleetResult(groups, fleet, meta)


def _judge_all(t: G.GroupTable, unlabelled: str | None, extra: list[str], **kw: Any) -> list[dict[str, Any]]:
    """Each group of ``t`` through :func:`.groups.judge` (``kw``), the run's ``extra`` notes first, the groups'
    assessments made together (:func:`~flopwatch.estimate.verdict.assess_many`)."""
    from flopwatch.estimate.verdict import assess_many, drive

    def step(g: int) -> Any:
        lab = f"{int(t.gpus[g])} GPU(s) without a job in part of the range: their time is judged here"
        return G.judge(t, g, [*extra, *G.notes(t, g, kw["present"], lab if t.key[g] == unlabelled else None)], **kw)  # fmt: skip

    cut = [range(lo, min(lo + JUDGE_BATCH, len(t.key))) for lo in range(0, len(t.key), JUDGE_BATCH)]
    return [r for gs in cut for r in drive([step(g) for g in gs], lambda a: assess_many(kw["profile"], a))]
