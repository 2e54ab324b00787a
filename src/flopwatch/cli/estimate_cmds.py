"""CLI: ``flopwatch calibrate``, ``flopwatch estimate``, ``flopwatch evaluate``.

Heavy imports (numpy/scipy models, matplotlib) happen inside the commands so ``flopwatch --help`` stays fast.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, counted, echo_json, fmt_flops, print_fit
from flopwatch.errors import InputError

_RECORDS_HELP = "Workload records: our JSON Lines, or the Jetson study's eval_results_*_records.json."


def _gate(min_util: float, precision: str) -> Any:
    from flopwatch.estimate.features import FrontierGate

    if not 0.0 <= min_util <= 1.0:
        hint = f" (did you mean {min_util / 100:g}?)" if 1.0 < min_util <= 100.0 else ""
        raise InputError(f"must be a fraction between 0 and 1, got {min_util:g}{hint}", field="--min-util")
    try:
        return FrontierGate(min_util=min_util, precision=precision)
    except InputError as e:
        raise InputError(e.detail, field="--precision") from None


def _check_confidence(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise InputError(
            f"must be strictly between 0 and 1 (e.g. 0.9), got {confidence:g}", field="--confidence"
        )
    return confidence


def _filters_line(gd: dict[str, Any]) -> str:
    counts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in gd["excluded_counts"].items()) or "none"
    return (
        f"filters: min util {gd['min_util']:.0%}, precision {gd['precision']} → kept {gd['n_kept']} of "
        f"{gd['n_input']} (excluded: {counts})"
    )


def _regime_cell(row: dict[str, Any]) -> str:
    """ "in" for a run inside the calibrated regime, else "out:" (or "unconfirmed:") and each observable beyond
    its calibrated range, shortest form (the first, and how many more); all of them are in --json
    (``regime_deviations``)."""
    if row["regime"] == "calibrated":
        return "in"
    parts = []
    for d in row["regime_deviations"]:
        if d["value"] is None:
            parts.append(f"{d['observable']} not measured")
        elif d["value"] < d["low"]:
            parts.append(f"{d['observable']} {d['value']:.3g} < {d['low']:.3g}")
        else:
            parts.append(f"{d['observable']} {d['value']:.3g} > {d['high']:.3g}")
    parts.sort(key=lambda p: not p.startswith("mean_util"))  # the calibration's gate first (FrontierGate)
    head = "out" if row["regime"] == "out-of-regime" else row["regime"]
    # the first reason only, so one wide cell does not push the whole table into blocks at 160 columns
    more = f" (+{len(parts) - 1} more)" if len(parts) > 1 else ""
    return f"{head}: {parts[0]}{more}" if parts else head


def _summary_line(summary: dict[str, Any]) -> str:
    """The errors over the runs with ground truth in regime (what the calibration speaks for), then over all of
    them, labelled."""

    def part(s: dict[str, Any]) -> str:
        held = s["verdict_bounds_hold"]
        cov = "—" if s["coverage"] is None else f"{s['coverage']:.0%}"
        return (
            f"MAE {s['mae_pct']:.2f} %, max |error| {s['max_abs_pct']:.2f} %, mean signed "
            f"{s['mean_signed_pct']:+.2f} %, calibrated-interval coverage {cov}"
            + ("" if held is None else f", verdict bounds hold the truth in {held:.0%}")
        )

    n, inr = summary["n_with_ground_truth"], summary["in_regime"]
    if inr["n_with_ground_truth"] == n:
        return f"all {n} runs in regime: {part(summary)}"
    head = f"in regime ({inr['n_with_ground_truth']} of {n} runs): "
    head += "none" if inr["mae_pct"] is None else part(inr)
    return f"{head}\nall {n} runs, {n - inr['n_with_ground_truth']} out of regime included: {part(summary)}"


def _simulated_line(n_sim: int, n: int) -> Any:
    from rich.text import Text

    t = Text()
    t.append("SIMULATED", style="bold red")
    t.append(
        f": {n_sim} of {counted(n, 'run')} {'comes' if n_sim == 1 else 'come'} from the simulator, not from measurements"
    )
    return t


def calibrate_cmd(
    records: Path = typer.Argument(..., help=_RECORDS_HELP),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the profile JSON."),
    model: str = typer.Option(
        "default", "--model", help="Estimator: default, eq1, eq2, loglin-p, loglin-p-bw."
    ),
    confidence: options.Confidence = 0.9,
    min_util: options.MinUtil = 0.8,
    precision: str = typer.Option(
        "fp32", "--precision", help="Keep only this precision (fp32, tf32, fp16, bf16) or 'all'."
    ),
    interval: str = typer.Option("auto", "--interval", help="Interval method: auto, conformal, student-t."),
    device: options.DeviceModel = None,
    as_json: options.Json = False,
) -> None:
    """Fit an estimator on records with ground truth.

    Writes a calibration profile (JSON) for ``estimate``, ``monitor`` and ``fleet estimate --profile``."""
    options.not_inputs([("--output", output)], [records])  # before any work: never overwrite an input
    from flopwatch.estimate.calibration import calibrate
    from flopwatch.records import load_records

    _check_confidence(confidence)
    gate = _gate(min_util, precision)
    rs = load_records(records, require=("net_energy_j", "duration_s", "total_flops"))
    prof = calibrate(rs, model, confidence=confidence, gate=gate, interval=interval, device=device)
    if output.exists() and output.is_dir():
        raise InputError("is a directory; give a file name for the profile", file=str(output))
    prof.save(output)
    d = prof.to_dict()
    summary = {
        "profile": str(output),
        "sha256": prof.sha256(),
        "model": prof.model_name,
        "component": prof.component,
        "params": prof.params,
        "n_train": d["training"]["n"],
        "filters": d["training"]["filters"],
        "confidence": prof.confidence,
        "interval": {k: v for k, v in d["interval"].items() if k != "residuals_log_ratio"},
        "diagnostics": d["diagnostics"],
    }
    if as_json:
        echo_json(summary)
        return
    from rich.table import Table

    con = console()
    t = Table(title=f"calibration profile → {output}")
    t.add_column("parameter")
    t.add_column("value", justify="right")
    # "default → eq1": the default resolves to a component; say so only when they differ
    comp = "" if prof.component in (None, prof.model_name) else f" → {prof.component}"
    t.add_row("model", f"{prof.model_name}{comp}")
    for k, v in prof.params.items():
        t.add_row(k, f"{v:.6g}")
    t.add_row("training runs", str(d["training"]["n"]))
    t.add_row(
        "interval",
        f"±{d['interval']['rel_halfwidth_pct']:.2f} % at {prof.confidence:.0%} ({d['interval']['method']})",
    )
    t.add_row("LOO MAE", f"{d['diagnostics']['loo_mae_pct']:.2f} %")
    print_fit(con, t)
    if d["training"].get("n_simulated"):
        con.print(_simulated_line(d["training"]["n_simulated"], d["training"]["n"]))
    con.print(_filters_line(d["training"]["filters"]))
    con.print(f"sha256 {prof.sha256()}")


def estimate_cmd(
    records: Path = typer.Argument(..., help=_RECORDS_HELP),
    profile: Path = typer.Option(
        ..., "--profile", "-p", help="Calibration profile JSON (flopwatch calibrate)."
    ),
    confidence: options.OptConfidence = None,
    threshold: str | None = typer.Option(
        None,
        "--threshold",
        help="Compute threshold in FLOP (e.g. 1e14): say above/below/uncertain per record.",
    ),
    declared: str | None = typer.Option(
        None,
        "--declared",
        help="Declared FLOP count (e.g. 1.2e14): say consistent/inconsistent/unverified per record (unverified: a warning forbids trusting the bounds).",
    ),
    strict: bool = typer.Option(
        False,
        "--strict",
        help="Fail on records of another precision instead of skipping (and listing) them.",
    ),
    device: options.DeviceModel = None,
    as_json: options.Json = False,
) -> None:
    """Estimate each record's FLOPs with a profile.

    Gives the sound verdict bounds beside the calibrated interval, and errors where ground truth is present."""
    from flopwatch.estimate.profile import Profile
    from flopwatch.evaluate.apply_profile import estimate_records
    from flopwatch.records import load_records

    thr = options.flop_count(threshold, "--threshold")
    decl = options.flop_count(declared, "--declared")
    if confidence is not None:
        _check_confidence(confidence)
    prof = Profile.load(profile)
    rs = load_records(records)
    prof.check_fingerprint(rs.fingerprint, file=str(records))
    run = estimate_records(
        prof,
        rs,
        profile_path=str(profile),
        records_path=str(records),
        confidence=confidence,
        threshold_flops=thr,
        declared_flops=decl,
        strict=strict,
        device=device,
    )
    out = run.to_dict()
    rows, skipped, summary = out["records"], out["skipped"], out["summary"]
    if as_json:
        echo_json(out)
        return
    from rich.table import Table

    con = console()
    conf = rows[0]["confidence"] if rows and rows[0]["confidence"] is not None else prof.confidence
    t = Table(
        title=f"FLOP estimates ({prof.model_name}): verdict bounds (sound) and calibrated {conf:.0%} interval"
    )
    for col in (
        "label",
        "estimate",
        "calibrated interval",
        "verdict bounds (sound)",
        "ground truth",
        "error %",
    ):
        t.add_column(col, justify="left" if col == "label" else "right", no_wrap=col != "label")
    t.add_column("regime")  # "in", or "out: …": the calibrated interval claims nothing out of regime
    if thr is not None:
        t.add_column(f"vs {fmt_flops(thr)}")
        t.add_column("decisive at")
    if decl is not None:
        t.add_column(f"declared {fmt_flops(decl)}")

    def rng(lo: float | None, hi: float | None) -> str:
        return f"{fmt_flops(lo)} – {'unbounded' if hi is None else fmt_flops(hi)}"

    for x in rows:
        cells = [
            x["label"],
            fmt_flops(x["estimate_flops"]),
            "—"
            if x["calibrated_lower_flops"] is None
            else rng(x["calibrated_lower_flops"], x["calibrated_upper_flops"]),
            rng(x["lower_flops"], x["upper_flops"]),
            fmt_flops(x["ground_truth_flops"]),
            "—" if x["rel_error_pct"] is None else f"{x['rel_error_pct']:+.2f}",
            _regime_cell(x),
        ]
        if thr is not None:
            v = x["threshold_verdict"]
            if (
                v == "uncertain" and x["warnings"]
            ):  # never an unexplained "uncertain" next to an upper under T
                v = f"uncertain ({len(x['warnings'])} warning{'s' if len(x['warnings']) > 1 else ''}: {x['warnings'][0]})"
            cells.append(v)
            cells.append("—" if x["decisive_at"] is None else f"T ≥ {x['decisive_at']:.3g} × estimate")
        if decl is not None:
            cells.append(x["declaration_verdict"])
        t.add_row(*cells)
    print_fit(con, t)
    con.print(
        "verdict bounds (sound): physics, the datasheet and the verifier's counters only — what 'above'/'below' "
        "rest on. calibrated interval: holds only if the workload resembles the calibration runs (later session "
        "included); it never makes a 'below'."
        + (
            " decisive at: the smallest threshold, as a multiple of the estimate, under which this run could be "
            "'below'."
            if thr is not None
            else ""
        )
    )
    n_sim = sum(1 for x in rows if x["simulated"])
    if n_sim:
        con.print(_simulated_line(n_sim, len(rows)))
    if summary["mae_pct"] is not None:
        con.print(_summary_line(summary))
    for x in rows:
        for w in x["warnings"]:
            con.print(f"warning {x['label']}: {w}", style="yellow")
    for line in _note_lines(rows):  # how the bound was taken (no sensor recorded …): not only in --json
        con.print(line, markup=False)
    if thr is not None:
        for line in _tighten_lines(rows):
            con.print(line)
    if skipped:
        con.print(f"skipped {len(skipped)} record(s) of another precision (use --strict to fail instead)")


def _note_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Each distinct note on the records' bounds once, with how many records it applies to (a sweep recorded
    without its sensor would otherwise print the same line per record)."""
    counts: dict[str, int] = {}
    for x in rows:
        for n in dict.fromkeys(x.get("notes") or ()):
            counts[n] = counts.get(n, 0) + 1
    return [f"note ({k} of {counted(len(rows), 'record')}): {n}" for n, k in counts.items()]


_TIGHTEN = re.compile(r"^(?P<what>.*): ×(?P<now>[0-9.e+-]+) → ×(?P<then>[0-9.e+-]+)$")


def _tighten_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The ``tighten`` hints, one line per observation that would help: the same hint on every record of a
    sweep would otherwise repeat once per record. Each record's own figures stay in ``--json``."""
    groups: dict[str, list[tuple[float, float]]] = {}
    lines: list[str] = []
    for x in rows:
        for h in x["tighten"]:
            m = _TIGHTEN.match(h)
            try:
                groups.setdefault(m["what"], []).append((float(m["now"]), float(m["then"])))  # type: ignore[index]
            except (TypeError, ValueError):  # a hint of another shape: printed as it is
                lines.append(f"tighten {x['label']}: {h}")
    for what, pairs in groups.items():
        now, then = [p[0] for p in pairs], [p[1] for p in pairs]

        def span(v: list[float]) -> str:
            lo, hi = min(v), max(v)
            return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}–{hi:.3g}"

        lines.append(
            f"tighten ({len(pairs)} of {len(rows)} record(s)): {what}: 'decisive at' T ≥ {span(now)} × estimate "
            f"→ T ≥ {span(then)} × estimate (each record's in --json, under 'tighten')"
        )
    return lines


def evaluate_cmd(
    records: Path = typer.Argument(..., help=_RECORDS_HELP),
    splits: options.Splits = 200,
    train: int = typer.Option(
        14,
        "--train",
        help="Training runs per split.",
        callback=options.count(ge=2),
    ),
    seed: options.Seed = 0,
    models: str | None = typer.Option(None, "--models", help="Comma-separated models (default: all)."),
    confidence: options.Confidence = 0.9,
    min_util: options.MinUtil = 0.8,
    precision: str = typer.Option("fp32", "--precision", help="Precision to evaluate, or 'all'."),
    figures: Path | None = typer.Option(None, "--figures", help="Write the figures (PNG) to this folder."),
    detail: bool = typer.Option(
        False,
        "--detail",
        help="Include per-workload, per-hyper-parameter and threshold tables in --json.",
    ),
    as_json: options.Json = False,
) -> None:
    """The study's repeated-split evaluation of every model.

    Held-out errors, interval coverage and threshold rates over repeated random train/test splits."""
    options.not_inputs([("--figures", figures)], [records])  # before any work: never overwrite an input
    from flopwatch.evaluate.splits import evaluate_models
    from flopwatch.records import load_records

    _check_confidence(confidence)
    gate = _gate(min_util, precision)
    names = None
    if models is not None:
        names = [m.strip() for m in models.split(",") if m.strip()]
        if not names:
            raise InputError("is empty; give comma-separated model names", field="--models")
    rs = load_records(records, require=("net_energy_j", "duration_s", "total_flops"))
    try:
        res = evaluate_models(
            rs, names, n_splits=splits, n_train=train, seed=seed, gate=gate, confidence=confidence
        )
    except InputError as e:  # name the CLI flag the user typed
        flag = {"n_splits": "--splits", "n_train": "--train", "seed": "--seed"}.get(e.field or "")
        if flag is None:
            raise
        raise InputError(e.detail, file=e.file, record=e.record, field=flag) from None
    written: list[Path] = []
    if figures is not None:
        from flopwatch.report.estimate_figures import write_figures

        # figures of simulated runs carry a watermark, so a PNG is never mistaken for a measurement
        sim = any(r.simulated for r in res.records)
        written = write_figures(res, figures, watermark="SIMULATED" if sim else None)
    d = res.to_dict(detail=detail)
    if figures is not None:
        d["figures"] = [str(p) for p in written]
    if as_json:
        echo_json(d)
        return
    from rich.table import Table

    con = console()
    t = Table(
        title=f"held-out errors: {d['n_splits']} splits of {d['n_frontier']} runs "
        f"({d['n_train']} train / {d['n_test']} test), seed {d['seed']}"
    )
    for col in (
        "model",
        "MAE %",
        "SD %",
        "mean signed %",
        "splits >10 %",
        "worst %",
        f"coverage ({confidence:.0%})",
    ):
        t.add_column(col, justify="left" if col == "model" else "right")
    for name, m in d["models"].items():
        t.add_row(
            name,
            f"{m['mae_pct']:.2f}",
            f"{m['sd_pct']:.2f}",
            f"{m['mean_signed_pct']:+.2f}",
            f"{m['frac_splits_any_over_10pct']:.1%}",
            f"{m['worst_pct']:.1f}",
            f"{m['coverage']:.1%}",
        )
    print_fit(con, t)
    if d["n_simulated"]:
        con.print(_simulated_line(d["n_simulated"], d["n_frontier"]))
    con.print(_filters_line(d["filters"]))
    for name, why in d.get("skipped_models", {}).items():
        con.print(f"model {name} not evaluated: {why}")
    dm = d["default_model"]
    if not d["default_evaluated"]:
        con.print(f"the default model was not evaluated; comparisons below use {dm}")
    for base, imp in d.get("default_vs_published", {}).items():
        con.print(
            f"{dm} vs {base}: MAE {imp['mae_diff_pp']:+.2f} pp better (95 % of splits within "
            f"[{imp['p025']:+.2f}, {imp['p975']:+.2f}])"
        )
    ts = d["models"][dm]["threshold_summary"]

    def pct(x: float | None) -> str:
        return "—" if x is None else f"{x:.0%}"

    def fp(x: float | None) -> str:  # the worst threshold's rate; "≤ 0%" read as a bound on nothing
        if x is None:
            return "wrongly accused —"
        return "none wrongly accused" if x == 0 else f"wrongly accused up to {pct(x)}"

    con.print(
        f"threshold sweep of the calibrated interval taken as a decision, not the sound verdict ({dm}, "
        f"{ts['n_thresholds']} thresholds {fmt_flops(ts['min_threshold_flops'])}–"
        f"{fmt_flops(ts['max_threshold_flops'])} FLOP): 'above' only when the {confidence:.0%} interval is "
        f"above → {fp(ts['max_fp_rate'])} (declared above, truly below), wrong below up to {pct(ts['max_wrong_below_rate'])} (declared below, "
        f"truly above), uncertain {pct(ts['mean_uncertain_rate'])} on average; deciding on the point estimate: "
        f"{fp(ts['point_max_fp_rate'])}, wrong below {pct(ts['point_mean_fn_rate'])} on average"
    )
    ss = d["models"][dm].get("session_shift")
    if ss:
        con.print(
            f"later session ({dm}: J/TFLOP ×e^±{ss['session_log_shifts'][0]:.2%}/{ss['session_log_shifts'][1]:.2%}, the "
            f"shifts fitted from the study's later-session MAEs; idle ±{ss['idle_shift_w'] * 1000:.0f} mW): calibrated "
            f"interval coverage {ss['coverage']:.1%}, {ss['coverage_widened']:.1%} widened for a later session "
            f"(median ±{ss['median_halfwidth_widened_pct']:.1f} %, the interval `estimate` prints)"
        )
    con.print(f"evaluation took {d['timing_s'] * 1000:.0f} ms")
    for p in written:
        con.print(f"wrote {p}")


def register(app: typer.Typer) -> None:
    """Add ``calibrate``, ``estimate`` and ``evaluate`` to ``app``."""
    app.command("calibrate")(calibrate_cmd)
    app.command("estimate")(estimate_cmd)
    app.command("evaluate")(evaluate_cmd)
