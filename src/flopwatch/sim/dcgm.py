"""A SIMULATED GPU fleet that speaks DCGM: :class:`~flopwatch.sim.accelerator.SimulatedAccelerator` twins play a
job schedule, scraped as dcgm-exporter would export them (:data:`flopwatch.telemetry.dcgm_metrics.TABLE`), as
OpenMetrics text. What each field holds, the scrape phases and the label styles: docs/fleet.md, "Simulated fleets".
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from flopwatch.devices import get_device, normalize_dtype
from flopwatch.errors import InputError
from flopwatch.io import atomic_path, scratch_dir
from flopwatch.sim.accelerator import SimulatedAccelerator
from flopwatch.sim.sensor import RawWorkload
from flopwatch.telemetry import dcgm_metrics as M

DRIVER_VERSION = "550.54.15"
TRUTH_SCHEMA = "flopwatch.sim.fleet_truth/1"
LABEL_STYLES = ("pod", "exported", "hpc", "info")

#: dcgm-exporter families written (name, OpenMetrics type, help): derived from the one metric table.
FAMILIES: tuple[tuple[str, str, str], ...] = tuple((m.name, m.om_type, m.help) for m in M.TABLE)
#: The Slurm-style job-info series of ``label_style="info"``: 1 while a job holds a GPU (job, Hostname, gpu).
JOB_INFO = "slurm_job_info"
HOPPER = ("h100", "h200")
#: Share of a MIG-partitioned GPU's work done by each of its instances (``mig=True``; simulated).
MIG_SHARES = (0.5, 0.3, 0.2)
_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})  # label values (:func:`label_text`)

#: Workloads of the random schedule: per-GPU steps of data-parallel training (FLOPs = 6·N·tokens, Kaplan et al.
#: 2020 §2.1; bytes: weights, gradients and optimizer state streamed once per step plus activations).
CATALOG: Mapping[str, RawWorkload] = {
    "llm-7b-bf16": RawWorkload("llm-7b-bf16", 6 * 6.7e9 * 8192, 1.6e11, 8192, 8, "bf16", "gpt", 32, 6.7e9),
    "llm-1b-bf16": RawWorkload("llm-1b-bf16", 6 * 1.3e9 * 8192, 4.0e10, 8192, 16, "bf16", "gpt", 24, 1.3e9),
    "vit-fp32": RawWorkload("vit-fp32", 6 * 3.0e8 * 4096, 1.5e10, 4096, 64, "fp32", "vit", 24, 3.0e8),
    "small-bf16": RawWorkload("small-bf16", 6 * 2.0e7 * 1024, 1.0e9, 1024, 8, "bf16", "gpt", 6, 2.0e7),
}
NAMESPACES = ("research", "prod", "eval")


@dataclass(frozen=True)
class FleetJob:
    """A job of the schedule: ``gpus`` GPUs from ``start_s`` for ``duration_s`` (virtual seconds)."""

    name: str
    namespace: str
    gpus: int
    start_s: float
    duration_s: float
    workload: Any


@dataclass
class _Alloc:
    job: FleetJob
    pod: str
    start_s: float  # pod holds the GPU from here …
    end_s: float  # … to here
    run: Any


@dataclass
class FleetTruth:
    """Ground truth of a simulated fleet (simulated, never measured)."""

    meta: dict[str, Any]
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": TRUTH_SCHEMA, "simulated": True, **self.meta, "pods": self.pods, "jobs": self.jobs}


def check_fleet_size(n_gpus: int, hours: float, gpus_per_node: int = 8, interval_s: float = 15.0) -> None:
    """InputError for a fleet that cannot be simulated: non-positive or non-finite sizes, or one so large it
    would run for days (over 10^6 GPUs or 10^7 scrapes per GPU, e.g. 40 000 h at 15 s)."""
    if not (1 <= n_gpus <= 1_000_000):
        raise InputError(f"must be between 1 and 1000000, got {n_gpus}", field="gpus")
    if not (1 <= gpus_per_node <= 1024):
        raise InputError(f"must be between 1 and 1024, got {gpus_per_node}", field="gpus_per_node")
    if not (math.isfinite(hours) and hours > 0):
        raise InputError(f"must be a finite number of hours > 0, got {hours}", field="hours")
    if not (math.isfinite(interval_s) and interval_s > 0):
        raise InputError(f"must be a positive duration, got {interval_s}", field="interval")
    if hours * 3600.0 / interval_s > 1e7:
        raise InputError(f"{hours:g} h at {interval_s:g} s is {hours * 3600.0 / interval_s:.3g} scrapes per GPU (limit 1e7)", field="hours")  # fmt: skip


#: Upper size of one OpenMetrics sample line of this writer: 300–335 B with pod labels (16 GPUs × 1 h: mean 310 B,
#: longest 334 B), so 400 B leaves room for long job names.
OPENMETRICS_LINE_BYTES = 400


def openmetrics_bytes(n_gpus: int, hours: float, interval_s: float = 15.0) -> float:
    """Disk :meth:`SimulatedFleet.write_openmetrics` needs at most (each line in a piece, then the file)."""
    return 2.0 * n_gpus * (hours * 3600.0 / interval_s) * len(FAMILIES) * OPENMETRICS_LINE_BYTES


def random_schedule(n_gpus: int, hours: float, *, gpus_per_node: int = 8, seed: int = 0) -> list[FleetJob]:
    """Whole-node jobs back to back with idle gaps on every node (seeded)."""
    check_fleet_size(n_gpus, hours, gpus_per_node)
    rng = np.random.default_rng([seed, 0xF1EE7])
    horizon = hours * 3600.0
    names = list(CATALOG)
    jobs = []
    n_nodes = math.ceil(n_gpus / gpus_per_node)
    for node in range(n_nodes):
        width = min(gpus_per_node, n_gpus - node * gpus_per_node)
        t = float(rng.uniform(0, min(1800.0, horizon / 4)))
        while t < horizon - 600:
            dur = float(min(rng.uniform(0.5, 4.0) * 3600.0, horizon - t - 60))
            if dur < 300:
                break
            wl = CATALOG[names[int(rng.integers(len(names)))]]
            ns = NAMESPACES[int(rng.integers(3))]
            jobs.append(FleetJob(f"job-{node:04d}-{len(jobs):05d}", ns, width, t, dur, wl))
            t += dur + float(rng.uniform(60.0, 1800.0))
    return jobs


def load_fleet_schedule(path: str | os.PathLike[str]) -> list[FleetJob]:
    """Jobs from a JSON or TOML job list (its fields: docs/fleet.md, "Simulated fleets")."""
    from flopwatch.io import parse_json, parse_toml, read_text

    p = Path(path)
    # regular file, size-capped, parsed without RecursionError/OverflowError (flopwatch.io)
    text = read_text(p, kind="fleet schedule")
    doc: Any = parse_toml(text, file=str(p)) if p.suffix.lower() == ".toml" else parse_json(text, file=str(p))
    items = doc.get("jobs") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise InputError("expected a non-empty list of jobs", file=str(p), field="jobs")
    out = []
    for i, it in enumerate(items):
        if not isinstance(it, dict):
            raise InputError("each job must be a table/object", file=str(p), record=i)
        name = str(it.get("name", f"job-{i}"))
        at = {"file": str(p), "record": name}  # where each error points
        wat = {**at, "field": "workload"}
        try:
            start = float(it["start_s"]) if "start_s" in it else float(it.get("start_h", 0.0)) * 3600.0
            dur = float(it["duration_s"]) if "duration_s" in it else float(it["hours"]) * 3600.0
            gpus = int(it.get("gpus", 1))
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            raise InputError(f"needs numeric start_s/start_h, duration_s/hours, gpus ({e})", **at) from None
        if not (math.isfinite(start) and math.isfinite(dur)) or gpus < 1 or dur <= 0 or start < 0:
            raise InputError("finite numbers with gpus >= 1, duration > 0 and start >= 0 are required", **at)
        w = it.get("workload", "llm-1b-bf16")
        if isinstance(w, str):
            if w not in CATALOG:
                raise InputError(f"unknown workload {w!r}; catalog: {', '.join(CATALOG)}", **wat)
            wl: Any = CATALOG[w]
        elif isinstance(w, dict):
            try:
                wl = RawWorkload(
                    label=str(w.get("label", name)),
                    flops_per_step=float(w["flops_per_step"]),
                    bytes_per_step=float(w.get("bytes_per_step", 0.0)),
                    tokens_per_step=float(w.get("tokens_per_step", 2048)),
                    batch_size=int(w.get("batch_size", 8)),
                    dtype=normalize_dtype(w.get("dtype", "bf16")),
                    num_layers=int(w.get("num_layers", 12)),
                )
            except (KeyError, TypeError, ValueError, OverflowError) as e:
                raise InputError(f"raw workload needs flops_per_step ({e})", **wat) from None
            nums = {k: getattr(wl, k) for k in ("flops_per_step", "bytes_per_step", "tokens_per_step")}
            if not all(math.isfinite(v) and v >= 0 for v in nums.values()) or wl.flops_per_step <= 0:
                raise InputError(f"needs finite flops_per_step > 0, bytes_per_step and tokens_per_step >= 0, got {nums}", **wat)  # fmt: skip
        else:
            raise InputError("workload must be a catalog name or a table", **wat)
        out.append(FleetJob(name, str(it.get("namespace", "default")), gpus, start, dur, wl))
    return out


def _uuid(seed: int, i: int) -> str:
    return "GPU-" + str(uuid.UUID(bytes=hashlib.sha256(f"flopwatch-sim|{seed}|{i}".encode()).digest()[:16]))


class SimulatedFleet:
    """``n_gpus`` simulated GPUs of one model (``device``) on nodes of ``gpus_per_node``, playing ``jobs``."""

    def __init__(
        self,
        n_gpus: int,
        hours: float,
        jobs: Sequence[FleetJob],
        *,
        device: str = "h100",
        gpus_per_node: int = 8,
        interval_s: float = 15.0,
        wall0: float = 1.7e9,
        seed: int = 0,
        label_style: str = "pod",
        resets: int = 0,
        drop: float = 0.0,
        omit: Iterable[str] = (),
        mig: bool = False,
    ) -> None:
        check_fleet_size(n_gpus, hours, gpus_per_node, interval_s)
        if label_style not in LABEL_STYLES:
            raise InputError(f"label style must be one of {', '.join(LABEL_STYLES)}", field="label_style")
        if not 0.0 <= drop < 1.0:
            raise InputError("drop must be in [0, 1)", field="drop")
        if not 0 <= resets <= 1000:  # a reset per scrape is no longer a counter
            raise InputError(f"must be between 0 and 1000, got {resets}", field="resets")
        # mig: each GPU split into len(MIG_SHARES) instances
        self.spec, self.mig = get_device(device), bool(mig)
        self.n_gpus, self.hours, self.gpus_per_node = int(n_gpus), float(hours), int(gpus_per_node)
        self.interval_s, self.wall0, self.seed = float(interval_s), float(wall0), int(seed)
        self.label_style, self.n_resets, self.drop = label_style, int(resets), float(drop)
        bad = [m for m in omit if m not in M.METRICS]
        if bad:
            raise InputError(f"unknown metric(s) to omit: {', '.join(bad)}", field="omit")
        self.families = tuple(f for f in FAMILIES if f[0] not in set(omit))
        if self.spec.key not in HOPPER:  # HMMA/IMMA/DFMA split exists on Hopper only
            self.families = tuple(f for f in self.families if "HMMA" not in f[0])
        self.allocs: list[list[_Alloc]] = [[] for _ in range(self.n_gpus)]
        self._place(jobs)

    # ------------------------------------------------------------------------------------------ schedule
    def _place(self, jobs: Sequence[FleetJob]) -> None:
        free_at = np.zeros(self.n_gpus)
        horizon = self.hours * 3600.0
        for job in sorted(jobs, key=lambda j: j.start_s):
            if job.start_s >= horizon:
                continue
            cand = np.flatnonzero(free_at <= job.start_s)
            if len(cand) < job.gpus:
                raise InputError(f"job {job.name!r} needs {job.gpus} GPUs at {job.start_s:.0f} s but only {len(cand)} are free", field="schedule")  # fmt: skip
            # prefer whole nodes in order (a multi-node job's pods are one per node)
            chosen = cand[: job.gpus]
            dur = min(job.duration_s, horizon - job.start_s - 30.0)
            for g in chosen:
                node = int(g) // self.gpus_per_node
                pod = job.name if job.gpus <= self.gpus_per_node else f"{job.name}-{node}"
                self.allocs[int(g)].append(_Alloc(job, pod, job.start_s, job.start_s + dur, None))
                free_at[g] = job.start_s + dur + 60.0

    def accelerator(self, g: int) -> SimulatedAccelerator:
        """The twin of GPU ``g`` with its schedule played (allocation ends updated to the run's real end)."""
        acc = SimulatedAccelerator(self.spec.key, seed=self.seed, device_index=g, wall0=self.wall0)
        for a in self.allocs[g]:
            acc.idle(max(0.0, a.start_s - acc.end_s))
            a.start_s = acc.end_s
            a.run = acc.run(a.job.workload, duration_s=a.end_s - a.start_s)
            a.end_s = acc.end_s  # the pod holds the GPU through the run's tail
        return acc

    # ------------------------------------------------------------------------------------------ sampling
    def scrape_times(self, g: int) -> np.ndarray:
        node = g // self.gpus_per_node
        h = int.from_bytes(hashlib.sha256(f"node|{self.seed}|{node}".encode()).digest()[:4], "little")
        phase = (h % 10_000) / 10_000 * self.interval_s
        return np.round(np.arange(phase, self.hours * 3600.0, self.interval_s), 3)

    def sample(
        self, g: int, acc: SimulatedAccelerator
    ) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
        """(times, metric key (:data:`flopwatch.telemetry.dcgm_metrics.TABLE`) → values, allocation index per time
        or −1) of GPU ``g``."""
        t = self.scrape_times(g)
        rng = np.random.default_rng([self.seed, g, 0xDC6])
        keep = rng.random(t.size) >= self.drop if self.drop > 0 else np.ones(t.size, bool)
        t = t[keep]
        e = acc.true_energy_j(t)
        busy_w = (acc.busy_time_s(t) - acc.busy_time_s(t - self.interval_s)) / self.interval_s
        busy_1s = acc.busy_time_s(t) - acc.busy_time_s(t - 1.0)
        st = acc.state(t)
        it, ifp = np.zeros(len(acc.runs) + 1), np.zeros(len(acc.runs) + 1)
        fmax = acc.dvfs.f_max_mhz
        for r in acc.runs:
            p = r.point
            d = normalize_dtype(r.workload.dtype)
            if p.util <= 0:
                continue
            rate_busy = p.achieved_flops_per_s / p.util
            T, th = float(r.workload.tokens_per_step), acc.params.tokens_half
            waste = 0.05 + 0.10 * th / (T + th)  # an assumption of this simulator (docs/fleet.md)
            inten = rate_busy / (self.spec.peak(d) * p.sm_clock_mhz / fmax)
            if d == "fp32":
                ifp[r.index] = inten  # fp32 without TF32 runs on the CUDA cores (issue ≈ useful FLOPs)
            else:
                it[r.index] = inten * (1 + waste)
        ri = st["run_index"].astype(int)  # −1 (idle) indexes the trailing zero
        vals = {
            "energy": np.rint(e * 1000.0 + 5.0e9 + g * 1.0e6),
            "power": np.round(e - acc.true_energy_j(t - 1.0), 3),
            "gpu_util": np.rint(100.0 * busy_1s),
            "gr": np.round(busy_w, 6),
            "sm": np.round(0.98 * busy_w, 6),
            "tensor": np.round(np.minimum(busy_w * it[ri], 1.0), 6),
            "fp32": np.round(np.minimum(busy_w * ifp[ri], 1.0), 6),
            "fp16": np.zeros(t.size),
            "fp64": np.zeros(t.size),
            "dram": np.round(np.where(st["working"], st["mem_util"], 0.0), 6),
            "clock": np.rint(st["sm_clock_mhz"]),
            "plimit": np.full(t.size, round(acc.power_limit_w, 3)),
            "temp": np.rint(st["temp_c"]),
        }
        vals["hmma"] = vals["tensor"]
        if self.n_resets:  # driver reloads: the counter restarts from 0 at a random scrape
            en = vals["energy"]
            at = rng.choice(np.arange(1, t.size), size=min(self.n_resets, t.size - 1), replace=False)
            for k in sorted(at):
                en[k:] = en[k:] - en[k] + np.rint((e[k] - e[k - 1]) * 1000.0 * 0.5)
        alloc = np.full(t.size, -1)
        for j, a in enumerate(self.allocs[g]):
            alloc[(t >= a.start_s) & (t < a.end_s)] = j
        return t, vals, alloc

    def labels(self, g: int, alloc: _Alloc | None) -> dict[str, str]:
        node = g // self.gpus_per_node
        host = f"node-{node:04d}"
        # "exported": the job's labels renamed, beside the exporter's own pod and namespace
        exporter = {"pod": f"nvidia-dcgm-exporter-{node:04d}", "namespace": "gpu-operator"}
        lab = {
            "gpu": str(g % self.gpus_per_node),
            "UUID": _uuid(self.seed, g),
            "device": f"nvidia{g % self.gpus_per_node}",
            "modelName": self.spec.name,
            "Hostname": host,
            "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
            "instance": f"{host}:9400",
            "job": "dcgm-exporter",
        }
        if alloc is not None:
            own = {"pod": alloc.pod, "namespace": alloc.job.namespace, "container": "trainer"}
            if self.label_style == "pod":
                lab |= own
            elif self.label_style == "exported":
                lab |= {f"exported_{k}": v for k, v in own.items()} | exporter
            elif self.label_style == "hpc":
                lab["hpc_job"] = alloc.job.name
            # "info": no job label on DCGM series; the job is in the JOB_INFO series (write_openmetrics)
        elif self.label_style == "exported":
            lab |= exporter
        return lab

    # ------------------------------------------------------------------------------------------ output
    def write_openmetrics(
        self,
        path: str | os.PathLike[str],
        *,
        progress: Callable[[int, int], None] | None = None,
        gpus: range | None = None,
    ) -> FleetTruth:
        """Write the fleet's history as OpenMetrics text and return its ground truth; ``gpus``: only those
        GPUs (why in pieces: docs/fleet.md, "Simulated fleets")."""
        out = Path(path)
        truth = FleetTruth(
            meta={
                "device": self.spec.key,
                "device_name": self.spec.name,
                "gpus": self.n_gpus,
                **{k: getattr(self, k) for k in ("hours", "interval_s", "wall0", "seed", "label_style")},
                "mig_instances": len(MIG_SHARES) if self.mig else 0,
                "families": [f[0] for f in self.families],
            }
        )
        # Pieces in a scratch folder beside OUT (removed at the end, or by the next run if this one is killed),
        # the file itself through an atomic temporary: never written through a symlink, never left half-written.
        with scratch_dir(out) as tmpdir, atomic_path(out) as tmp_out:
            with ExitStack() as pieces:  # every piece closed, however the loop ends
                piece = lambda name: pieces.enter_context(open(tmpdir / name, "w", buffering=1 << 20))  # noqa: E731
                files = {f[0]: piece(f"{i:02d}") for i, f in enumerate(self.families)}
                info = piece("info")
                todo = range(self.n_gpus) if gpus is None else gpus
                for g in todo:
                    acc = self.accelerator(g)
                    t, vals, alloc = self.sample(g, acc)
                    self._truth(truth, g, acc)
                    ts = [f"{self.wall0 + x:.3f}" for x in t]
                    for seg in np.split(np.arange(t.size), np.flatnonzero(np.diff(alloc)) + 1):
                        if seg.size == 0:
                            continue
                        a = int(alloc[seg[0]])
                        lab = self.labels(g, self.allocs[g][a] if a >= 0 else None)
                        # MIG: one series per instance; whole-GPU fields repeated (as dcgm-exporter does), the
                        # profiling fields split by the instance's share of the work (an assumption of this simulator)
                        for inst, share in enumerate(MIG_SHARES if self.mig else (1.0,)):
                            mig = {M.MIG_LABEL: str(inst), "GPU_I_PROFILE": "1g.10gb"} if self.mig else {}
                            lstr = label_text(lab | mig)
                            for name, fh in files.items():
                                m = M.METRICS[name]
                                v = vals[m.key][seg] * (share if m.profiling else 1.0)
                                prefix = f"{name}{{{lstr}}} "
                                pts = zip(v.tolist(), seg.tolist(), strict=True)
                                fh.write("".join(f"{prefix}{x:.15g} {ts[i]}\n" for x, i in pts))
                    if self.label_style == "info":
                        self._write_info(info, g, t, alloc, ts)
                    if progress is not None:
                        progress(g + 1 - todo.start, len(todo))
            with open(tmp_out, "w") as dst:
                dst.write(
                    "# HELP flopwatch_simulated 1: every series in this file is SIMULATED by flopwatch (not measured).\n"
                    "# TYPE flopwatch_simulated gauge\n"
                )
                # every 5 min, so any range query over this history can tell it is simulated
                for tm in np.arange(0.0, self.hours * 3600.0, 300.0):
                    dst.write(f"flopwatch_simulated 1 {self.wall0 + tm:.3f}\n")
                parts = [(f"{i:02d}", *f) for i, f in enumerate(self.families)]
                if self.label_style == "info":
                    parts.append(("info", JOB_INFO, "gauge", "1 while the job holds the GPU (simulated)."))
                for part, name, typ, help_ in parts:
                    dst.write(f"# HELP {name} {help_}\n# TYPE {name} {typ}\n")
                    with open(tmpdir / part) as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
                dst.write("# EOF\n")
        return truth

    def _write_info(self, fh: Any, g: int, t: np.ndarray, alloc: np.ndarray, ts: list[str]) -> None:
        """The job-info samples of GPU ``g``: one per scrape while a job holds it (labels: job, Hostname, gpu)."""
        where = {"Hostname": f"node-{g // self.gpus_per_node:04d}", "gpu": str(g % self.gpus_per_node)}
        for j in np.unique(alloc[alloc >= 0]).tolist():
            lab = {"job": self.allocs[g][j].job.name} | where
            prefix = f"{JOB_INFO}{{{label_text(lab)}}} 1 "
            fh.write("".join(f"{prefix}{ts[i]}\n" for i in np.flatnonzero(alloc == j).tolist()))

    def _truth(self, truth: FleetTruth, g: int, acc: SimulatedAccelerator) -> None:
        for a in self.allocs[g]:
            e = acc.true_energy_j(np.array([a.start_s, a.end_s]))
            energy = float(e[1] - e[0])
            idle = acc.idle_power_w * (a.end_s - a.start_s)
            for table, key in ((truth.pods, a.pod), (truth.jobs, a.job.name)):
                rec = table.setdefault(
                    key,
                    {
                        "namespace": a.job.namespace,
                        "job": a.job.name,
                        "workload": a.job.workload.label,
                        "dtype": a.job.workload.dtype,
                        "gpus": 0,
                        "start": self.wall0 + a.start_s,
                        "end": self.wall0 + a.end_s,
                        **dict.fromkeys(_SUMS[1:], 0.0),
                        "simulated": True,
                    },
                )
                rec["start"] = min(rec["start"], self.wall0 + a.start_s)
                rec["end"] = max(rec["end"], self.wall0 + a.end_s)
                adds = (1, energy, energy - idle, a.run.total_flops, a.end_s - a.start_s)
                for k, v in zip(_SUMS, adds, strict=True):
                    rec[k] += v


#: What a pod's and a job's ground truth sum over their GPUs.
_SUMS = ("gpus", "energy_j", "net_energy_j", "flops", "gpu_seconds")


def label_text(labels: Mapping[str, str]) -> str:
    """OpenMetrics label set body: values escaped as the exposition format requires (backslash, double quote and
    line feed; prometheus/client_python ``openmetrics/exposition.py``), so any job or pod name backfills."""
    return ",".join(f'{k}="{str(v).translate(_ESCAPES)}"' for k, v in labels.items())
