"""The analysis of ``flopwatch run``: the stages after the trace, in order, each a public function elsewhere.

detect (:func:`flopwatch.detect.detect_workloads`) → join (:func:`flopwatch.join.join_records`) → features and the
frontier gate (:class:`flopwatch.estimate.features.FrontierGate`) → calibrate
(:func:`flopwatch.estimate.calibration.calibrate`) → evaluate (:func:`flopwatch.evaluate.splits.evaluate_models`) →
verdict (:func:`flopwatch.evaluate.apply_profile.estimate_records` at a threshold) → figures (:mod:`flopwatch.report`).

:func:`analyse` runs them on an :class:`~flopwatch.pipeline.execute.Execution` and writes each stage's output file as
soon as it exists (records, profile, evaluation, figures), so a later failure loses nothing already computed. The
records go from the join to the calibration in memory (no write-then-read). Stage functions are injectable through
:class:`Stages` (tests replace one to check the failure paths).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from flopwatch.detect import Detection, detect_workloads
from flopwatch.errors import InputError
from flopwatch.estimate.calibration import calibrate
from flopwatch.estimate.features import DEFAULT_MIN_UTIL, FrontierGate, GateResult
from flopwatch.estimate.observe import SampledRun, windows_from_trace
from flopwatch.estimate.verdict import assess_record
from flopwatch.evaluate.splits import EvaluationResult, evaluate_models
from flopwatch.evaluate.threshold import HeldoutAssessments, heldout_assessments
from flopwatch.join import JoinResult, Mismatch, join_records, trace_context, with_context
from flopwatch.pipeline.device import DeviceChoice
from flopwatch.pipeline.execute import Execution
from flopwatch.pipeline.layout import EVALUATION_FILE, FIGURES_DIR, PROFILE_FILE, RECORDS_FILE, write_json
from flopwatch.pipeline.plan import Plan, RunOptions
from flopwatch.pipeline.progress import ANALYSIS_S, Progress
from flopwatch.records import RecordSet, WorkloadRecord, append_record, record_set
from flopwatch.telemetry.source import ParquetSource, TraceLike, TraceSource, open_source
from flopwatch.units import finite

if TYPE_CHECKING:
    import pandas as pd

#: The study's split ratio: 14 training runs of 21 (Fowler 2026).
TRAIN_FRACTION = 14 / 21
MIN_FRONTIER = 6


@dataclass(frozen=True)
class Stages:
    """The stage functions :func:`analyse` calls (flopwatch's own by default)."""

    detect: Callable[..., Detection] = detect_workloads
    join: Callable[..., JoinResult] = join_records
    calibrate: Callable[..., Any] = calibrate
    evaluate: Callable[..., EvaluationResult] = evaluate_models


@dataclass
class Analysis:
    """Everything the stages produced, for the summary and the report."""

    trace_path: Path
    trace_rows: int  # rows of the trace file, gaps included (identical repeated samples counted once)
    detection: Detection
    joined: list[WorkloadRecord]
    mismatches: list[Mismatch]
    measured: RecordSet  # joined records with ground truth (the gate's input)
    calibration_dtype: str
    gate: GateResult
    profile: Any  # flopwatch.estimate.profile.Profile
    evaluation: EvaluationResult
    threshold_flops: float
    verdicts: list[ThresholdVerdict]
    figures: list[Path] = field(default_factory=list)
    figure_errors: list[str] = field(default_factory=list)
    # the verifier's verdicts of held-out runs (estimate.verdict.assess, a profile per split): the report's table
    heldout: HeldoutAssessments | None = None


def frontier_gate(measured: RecordSet, *, where: str, sweep: str, file: str) -> FrontierGate:
    """The gate of the run: mean utilisation ≥ :data:`DEFAULT_MIN_UTIL` and the most common precision among the
    runs that pass it (one precision per calibration, as the study's fp32-only frontier)."""
    util_ok = [r for r in measured if r.mean_util is not None and r.mean_util >= DEFAULT_MIN_UTIL]
    if not util_ok:
        raise InputError(
            f"no workload reached {DEFAULT_MIN_UTIL * 100:.0f} % mean utilisation on {where}; nothing to "
            f"calibrate on ({len(measured)} measured, sweep {sweep!r})",
            file=file,
        )
    dtypes = [r.dtype for r in util_ok]
    return FrontierGate(min_util=DEFAULT_MIN_UTIL, precision=max(sorted(set(dtypes)), key=dtypes.count))


@dataclass(frozen=True)
class ThresholdVerdict:
    """The verdict on one frontier run at the run's threshold, beside its truth: the estimate and calibrated
    interval of the profile, the bounds the verdict rests on (:func:`flopwatch.estimate.verdict.assess_record`)."""

    label: str
    total_flops: float
    estimate_flops: float
    calibrated_lower_flops: float  # the calibrated interval: the estimate's, never the verdict's
    calibrated_upper_flops: float
    verdict_lower_flops: float  # the bounds the verdict used (sound; inf: unbounded)
    verdict_upper_flops: float
    verdict: str
    threshold_flops: float

    @property
    def truth(self) -> str:
        return "above" if self.total_flops > self.threshold_flops else "below"

    @property
    def correct(self) -> bool | None:
        """Whether the verdict matches the truth; None for "uncertain"."""
        return None if self.verdict == "uncertain" else self.verdict == self.truth

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "total_flops": self.total_flops,
            "estimate_flops": self.estimate_flops,
            "calibrated_lower_flops": self.calibrated_lower_flops,
            "calibrated_upper_flops": self.calibrated_upper_flops,
            "verdict_lower_flops": finite(self.verdict_lower_flops),
            "verdict_upper_flops": finite(self.verdict_upper_flops),  # null: unbounded
            "err_pct": (self.estimate_flops / self.total_flops - 1.0) * 100.0,
            "verdict": self.verdict,
            "truth": self.truth,
            "correct": self.correct,
        }


def threshold_verdicts(
    profile: Any, kept: RecordSet, threshold_flops: float, sampled: Mapping[str, SampledRun] | None = None
) -> list[ThresholdVerdict]:
    """Stage **verdict** on the frontier runs at one threshold: above / below / uncertain, against the truth
    (typed: the profile's estimate and the sound assessment of each run, over its trace windows where
    ``sampled`` has them, no row dicts in between)."""
    out = []
    for r in kept:
        e = profile.estimate_record(r)
        a = assess_record(profile, r, threshold_flops=threshold_flops, sampled=(sampled or {}).get(r.label))
        out.append(
            ThresholdVerdict(
                r.label,
                float(r.total_flops),
                e.flops,
                # the interval as `estimate` prints it (widened for a later session), else the profile's own
                e.lower_flops if a.calibrated_lower_flops is None else a.calibrated_lower_flops,
                e.upper_flops if a.calibrated_upper_flops is None else a.calibrated_upper_flops,
                a.lower_flops,
                a.upper_flops,
                a.verdict,
                threshold_flops,
            )
        )
    return out


def sampled_runs(trace_path: Path, records: RecordSet, detection: Detection) -> dict[str, SampledRun]:
    """Each joined record's segment of the trace as the verifier's bounds read it
    (:func:`~flopwatch.estimate.observe.windows_from_trace`: power, SM clock, power limit and pipe counters where
    the trace has them), by label; a record the join placed on no segment is left out (judged on its totals)."""
    from flopwatch.telemetry.trace import Trace

    segs = {(round(s.start_s, 6), round(s.end_s, 6)): s for s in detection.segments}
    wanted = []
    for r in records:
        j = r.raw.get("join") or {}
        key = (j.get("segment_start_s"), j.get("segment_end_s"))
        if None not in key and r.idle_power_w is not None:
            seg = segs.get((round(float(key[0]), 6), round(float(key[1]), 6)))
            if seg is not None:
                wanted.append((r, seg))
    if not wanted:
        return {}
    tr = Trace.read(trace_path)
    return {r.label: windows_from_trace(tr, seg, idle_power_w=float(r.idle_power_w)) for r, seg in wanted}


#: Up to this many rows the timeline figure draws every sample (the whole trace is loaded); above it, a min/max
#: envelope per time bin streamed in bounded memory (:func:`timeline_samples`).
TIMELINE_MAX_ROWS = 200_000
#: Envelope bins: two per pixel column of the 12-inch, 100-dpi timeline (report.run_figures.fig_timeline).
TIMELINE_BINS = 2400
_TIMELINE_COLUMNS = ("power_w", "util")


def timeline_samples(
    trace: TraceLike, *, max_rows: int = TIMELINE_MAX_ROWS, bins: int = TIMELINE_BINS
) -> pd.DataFrame:
    """What the timeline figure plots (columns ``t_s``, ``power_w``, ``util``): every reading when the trace has at
    most ``max_rows`` rows; else, per time bin, the lowest and highest power and utilisation (at the bin's centre),
    which a line through every sample would fill at the figure's resolution. One pass over the rows (the time span
    of a Parquet trace comes from its footer), memory bounded by a chunk and the bins, whatever the trace's length;
    the rows are not validated again (detection did)."""
    import pandas as pd

    src = open_source(trace)
    n = src.num_rows
    if n is not None and n <= max_rows:
        parts = [ch.take(~ch.is_gap) for ch in src.chunks(_TIMELINE_COLUMNS, validate=False)]
        cols = {"t_s": np.concatenate([p.t_s for p in parts]) if parts else np.zeros(0)}
        for c in _TIMELINE_COLUMNS:
            cols[c] = np.concatenate([p.cols[c] for p in parts]) if parts else np.zeros(0)
        return pd.DataFrame(cols).sort_values("t_s", kind="stable").reset_index(drop=True)
    span = src.t_span() if isinstance(src, ParquetSource) else None
    if span is None:  # a journal or a file without statistics: one pass over the times only
        t_lo, t_hi = math.inf, -math.inf
        for ch in src.chunks((), validate=False):
            if len(ch):
                t_lo, t_hi = min(t_lo, float(ch.t_s.min())), max(t_hi, float(ch.t_s.max()))
    else:
        t_lo, t_hi = span
    width = max(t_hi - t_lo, 1e-9) / bins
    lo = {c: np.full(bins, np.inf) for c in _TIMELINE_COLUMNS}
    hi = {c: np.full(bins, -np.inf) for c in _TIMELINE_COLUMNS}
    for ch in src.chunks(_TIMELINE_COLUMNS, validate=False):
        ok = ~ch.is_gap
        k = np.clip(((ch.t_s[ok] - t_lo) / width).astype(np.int64), 0, bins - 1)
        for c in lo:
            v = ch.cols[c][ok]
            fin = np.isfinite(v)
            np.minimum.at(lo[c], k[fin], v[fin])
            np.maximum.at(hi[c], k[fin], v[fin])
    centre = t_lo + (np.arange(bins) + 0.5) * width
    seen = np.isfinite(lo["power_w"]) | np.isfinite(lo["util"])
    out: dict[str, np.ndarray] = {"t_s": np.repeat(centre[seen], 2)}
    for c in lo:
        pair = np.stack([lo[c][seen], hi[c][seen]], axis=1).ravel()
        out[c] = np.where(np.isfinite(pair), pair, np.nan)
    return pd.DataFrame(out)


def trace_rows(src: TraceSource) -> int:
    """The rows of a trace as :meth:`Trace.read` would load them (identical repeated samples counted once): the
    count the source already knows (a Parquet footer) less the duplicates its validated pass dropped; one
    streaming pass only when the source cannot tell (a crash journal)."""
    if src.num_rows is not None:
        return src.num_rows - src.duplicates_dropped
    return sum(len(ch) for ch in src.chunks(()))


def analyse(
    choice: DeviceChoice,
    plan: Plan,
    opts: RunOptions,
    ex: Execution,
    prog: Progress,
    stages: Stages | None = None,
) -> Analysis:
    """Run the analysis stages on what the executor recorded (see the module docstring)."""
    st = stages or Stages()
    outdir = opts.outdir
    rec_path = outdir / RECORDS_FILE

    prog.stage("detecting workloads")
    # Streamed from the file (detection and energy in passes over row groups, memory bounded by a chunk); only
    # the timeline figure loads the whole trace.
    src = open_source(ex.trace_path)
    det = st.detect(src)
    jr = st.join(
        ex.records, det, t0_s=src.metadata.get("t0_monotonic_s") or 0.0, device=ex.sensor_info.device_id
    )
    mismatches = list(jr.mismatches) + [Mismatch(f["label"], "failed", f["error"]) for f in ex.failures]
    # each joined record carries the trace's sensor, rate and spec (the twin's: labelled simulated), so the verdict
    # applies the sensor-timing table's blind share to it as to a monitor row (join.trace_context)
    ctx = trace_context(src.metadata, ex.sensor_info.device_id)
    joined = [
        replace(
            with_context(r, ctx) if (r.join or {}).get("status") == "ok" else r,
            simulated=bool(choice.simulated),
        )
        for r in jr.records
    ]
    for r in joined:
        append_record(rec_path, r)
    prog.advance(ANALYSIS_S["detect"])

    prog.stage("frontier gate and calibration")
    allrs = record_set(joined, source=str(rec_path))
    # Every run with ground truth goes to the gate; one the join gave no telemetry has no utilisation, so the gate
    # lists it as excluded ("mean utilisation unknown") beside its join mismatch.
    rs = allrs.subset([r for r in allrs if r.total_flops])
    gate = frontier_gate(rs, where=choice.label, sweep=plan.sweep_name, file=str(rec_path))
    gres = gate.apply(rs)
    if len(gres.kept) < MIN_FRONTIER:
        raise InputError(
            f"only {len(gres.kept)} workloads pass the frontier gate (util ≥ {DEFAULT_MIN_UTIL * 100:.0f} %, "
            f"{gate.precision}); at least {MIN_FRONTIER} are needed to calibrate and evaluate",
            file=str(rec_path),
        )
    profile = st.calibrate(rs, "default", gate=gate)
    profile.save(outdir / PROFILE_FILE)
    prog.advance(ANALYSIS_S["calibrate"])

    prog.stage("repeated-split evaluation of all estimators")
    n_frontier = len(gres.kept)
    n_train = max(2, min(14, int(round(TRAIN_FRACTION * n_frontier)), n_frontier - 1))
    n_splits = 200 if opts.n_splits is None else opts.n_splits
    models = list(opts.models) if opts.models else None
    # models=None lets evaluate_models skip (and list) estimators this data cannot support: too few
    # calibration runs, or no DRAM-traffic counter (eq1 and the bandwidth models on pre-Hopper NVML).
    ev = st.evaluate(rs, models, n_splits=n_splits, n_train=n_train, seed=opts.seed, gate=gate)
    evd = ev.to_dict()
    evd["simulated"] = bool(choice.simulated)
    write_json(outdir / EVALUATION_FILE, evd)
    prog.advance(ANALYSIS_S["evaluate"])

    prog.stage("threshold analysis")
    threshold = float(np.exp(np.mean(np.log(ev.truth))))  # geometric middle of the sweep's compute range
    sampled = sampled_runs(Path(ex.trace_path), gres.kept, det)
    verdicts = threshold_verdicts(profile, gres.kept, threshold, sampled)
    # the verifier's view of unseen runs: each split's test runs judged by a profile fitted on its training runs
    # (plus the runs the gate excluded, which the full profile sees too) with the sound assessment
    frontier = set(gres.kept.labels)
    others = [r for r in rs if r.label not in frontier]
    held = heldout_assessments(
        ev,
        lambda train: st.calibrate(rs.subset([*train, *others]), "default", gate=gate),
        sampled=sampled,
    )
    prog.advance(ANALYSIS_S["threshold"])

    a = Analysis(
        Path(ex.trace_path),
        trace_rows(src),
        det,
        joined,
        mismatches,
        rs,
        gate.precision,
        gres,
        profile,
        ev,
        threshold,
        verdicts,
        heldout=held,
    )
    write_figures(a, outdir, simulated=choice.simulated, prog=prog)
    return a


def write_figures(a: Analysis, outdir: Path, *, simulated: bool, prog: Progress) -> None:
    """The run's figures into ``outdir/figures``; one that cannot be drawn is recorded in ``a.figure_errors``."""
    prog.stage("figures")

    def run_figs() -> list[Path]:
        from flopwatch.report.run_figures import write_run_figures

        return write_run_figures(
            timeline_samples(a.trace_path),
            a.detection,
            [r.to_dict() for r in a.joined],
            a.gate,
            a.evaluation,
            outdir / FIGURES_DIR,
            simulated=simulated,
        )

    def est_figs() -> list[Path]:
        from flopwatch.report.estimate_figures import write_figures

        return list(
            write_figures(a.evaluation, outdir / FIGURES_DIR, watermark="SIMULATED" if simulated else None)
        )

    for make, n in ((run_figs, 3), (est_figs, 5)):
        # A figure that cannot be drawn must not cost the run its summary and report: say so in both.
        try:
            a.figures += make()
        except Exception as e:
            a.figure_errors.append(f"{make.__name__}: {type(e).__name__}: {e}")
        prog.advance(ANALYSIS_S["figure"] * n)
