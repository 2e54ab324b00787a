"""CLI of the power-model area: ``flopwatch powermodel reproduce|fit|predict|evaluate|inverse`` and ``flopwatch bench``.

Heavy libraries (pandas, scipy, matplotlib, torch) are imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, counted, echo_json, fmt_num, new_app, print_fit

pm_app = new_app(
    "MFU ⇄ power models after Enskat & Wiesner (MASCOTS 2026). Reproduce, fit, predict, evaluate, inverse."
)


def _load(data: list[Path] | None, gpu: str | None = None, keep_nan_mfu: bool = False):  # noqa: ANN202
    from flopwatch.errors import InputError
    from flopwatch.powermodel.datasets import load_aggregates

    loaded = load_aggregates(data or None, gpu=gpu, keep_nan_mfu=keep_nan_mfu)
    if loaded.df.empty:  # e.g. a file holding only the idle baseline row, or only rows without power
        why = "; ".join(loaded.notes) or "no data rows"
        raise InputError(f"no benchmark runs left to analyse ({why})", file=", ".join(loaded.sources))
    return loaded


@pm_app.command("reproduce")
def reproduce_cmd(
    json_out: options.Json = False,
    figures: Path | None = typer.Option(
        None, "--figures", help="Write Figure 1 and Figure 4 (PNG) into DIR."
    ),
    n_boot: int = typer.Option(
        2000,
        "--n-boot",
        help="Bootstrap resamples.",
        # memory grows ~32 KB a resample (20 000: 795 MB peak RSS, measured 2026-12-01), so 1e7 asked for
        # ~300 GB; 50 000 (~1.6 GB) is 25x the study's 2 000
        callback=options.count(ge=10, le=50_000),
    ),
    seed: options.Seed = 0,
) -> None:
    """MASCOTS Tables II, III and IV from the bundled data. Next to the published values."""
    from rich.table import Table

    from flopwatch.powermodel import published
    from flopwatch.powermodel.reproduce import reproduce

    r = reproduce(n_boot=n_boot, seed=seed)
    fig_paths: list[str] = []
    if figures is not None:
        from flopwatch.report.powermodel_figures import write_figures

        fig_paths = [str(p) for p in write_figures(r.data, r.gpu_fit, r.cell_fit, figures)]
    if json_out:
        d = r.to_dict()
        d["figures"] = fig_paths
        echo_json(d)
        return
    con = console()
    cmp = {(c["table"], c["gpu"], c["column"]): c for c in r.comparison()}

    def cell(t: str, g: str, col: str, d: int) -> Any:
        from rich.text import Text

        c = cmp[(t, g, col)]
        diff = "" if c["diff"] is None else f" ({c['diff']:+.{d + 1}f})"
        out = Text(f"{fmt_num(c['ours'], d)} / {fmt_num(c['published'], d)}{diff} ")
        if c["match"] is not None:
            out.append("✓" if c["match"] else "✗", style="green" if c["match"] else "red")
        return out

    t2 = Table(
        title=f"Table II — power ~ MFU per GPU (ours / published (diff); 95 % CI from {n_boot} bootstraps)"
    )
    for h in ("GPU", "n", "R²", "R² 95 % CI", "MAPE %", "MAPE 95 % CI", "util R² (not reproducible)"):
        t2.add_column(h)
    for g, row in r.table2.iterrows():
        t2.add_row(
            g,
            str(int(row["n"])),
            cell("II", g, "r2", 2),
            f"[{row['r2_lo']:.3f}, {row['r2_hi']:.3f}] (±{row['r2_pm']:.3f} vs ±{published.TABLE2[g]['r2_pm']})",
            cell("II", g, "mape_pct", 1),
            f"[{row['mape_lo']:.2f}, {row['mape_hi']:.2f}] (±{row['mape_pm']:.2f} vs ±{published.TABLE2[g]['mape_pm']})",
            cell("II", g, "util_r2", 2),
        )
    print_fit(con, t2)
    t3 = Table(title="Table III — residual SD as % of mean power (ours / published (diff))")
    for h in ("GPU", "SD_GPU %", "SD_cell %", "noise floor %"):
        t3.add_column(h)
    for g in r.table3.index:
        t3.add_row(
            g,
            cell("III", g, "sd_gpu_pct", 2),
            cell("III", g, "sd_cell_pct", 2),
            cell("III", g, "noise_pct", 2),
        )
    print_fit(con, t3)
    t4 = Table(title="Table IV — batch 1 vs batch 128 (ours / published (diff))")
    for h in ("GPU", "MFU₁ %", "MFU₁₂₈ %", "P₁ W", "P₁₂₈ W", "P₁₂₈/P₁"):
        t4.add_column(h)
    for g, row in r.table4.iterrows():
        t4.add_row(
            g,
            cell("IV", g, "mfu1_pct", 1),
            cell("IV", g, "mfu128_pct", 1),
            cell("IV", g, "power1_w", 0),
            cell("IV", g, "power128_w", 0),
            f"{row['power_ratio']:.2f}",
        )
    print_fit(con, t4)
    con.print(f"Published values: {published.CITATION}.", style="dim")
    for n in r.notes:
        con.print(f"note: {n}", style="dim")
    con.print(
        f"computed in {r.seconds['total']:.2f} s (bootstrap {r.seconds['bootstrap']:.2f} s)", style="dim"
    )
    for p in fig_paths:
        con.print(f"wrote {p}")


@pm_app.command("fit")
def fit_cmd(
    data: list[Path] = typer.Argument(
        ..., metavar="CSV...", help="Aggregate CSV(s) in the MASCOTS schema (e.g. from `flopwatch bench`)."
    ),
    by: str = typer.Option(
        "gpu", "--by", help="Group fits by 'gpu', 'dtype' (gpu, dtype) or 'cell' (gpu, dtype, batch)."
    ),
    x: str = typer.Option("mfu_pct", "--x", help="Predictor: mfu_pct or gpu_util_pct."),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU name for files without a gpu column."),
    output: Path = typer.Option(..., "-o", "--output", help="Write the model JSON here."),
    json_out: options.Json = False,
) -> None:
    """Fit linear power models on aggregate CSVs and save them."""
    options.not_inputs([("--output", output)], data)  # before any work: never overwrite an input
    from flopwatch.errors import InputError
    from flopwatch.powermodel.fit import fit_power_model

    if by not in ("gpu", "dtype", "cell"):
        raise InputError(f"--by must be 'gpu', 'dtype' or 'cell', got {by!r}", field="by")
    loaded = _load(data, gpu=gpu)
    m = fit_power_model(loaded.df, by=by, x=x)
    if output.exists() and output.is_dir():
        raise InputError("is a directory", file=str(output))
    m.save(output)
    if json_out:
        echo_json(m.to_dict())
        return
    con = console()
    print_fit(con, fit_table(m))
    for n in loaded.notes:
        con.print(f"note: {n}", style="dim")
    con.print(f"wrote {output}")


@pm_app.command("predict")
def predict_cmd(
    model: str = typer.Option(
        "bundled", "--model", help="MODEL.json from `powermodel fit`, or 'bundled' (MASCOTS data)."
    ),
    gpu: str = typer.Option(..., "--gpu", help="GPU name (e.g. A100, L40, 'RTX 4070 Ti')."),
    dtype: str = typer.Option(..., "--precision", help="fp32, fp16 or bf16."),
    batch: int = typer.Option(
        ...,
        "--batch",
        help="Batch size (per-cell models need a fitted batch).",
        callback=options.count(ge=1),
    ),
    mfu: float | None = typer.Option(
        None,
        "--mfu",
        help="Planned MFU in percent.",
        callback=options.in_range(0.0, 100.0, unit="%"),
    ),
    tokens_per_s: float | None = typer.Option(
        None,
        "--tokens-per-s",
        help="Planned throughput (tokens/s).",
        callback=options.positive(),
    ),
    flops_per_token: float | None = typer.Option(
        None,
        "--flops-per-token",
        help="Training FLOPs per token.",
        callback=options.positive(),
    ),
    peak: str = typer.Option(
        "implied", "--peak", help="Peak table for MFU from tokens/s: implied|paper|datasheet."
    ),
    peak_tflops: float | None = typer.Option(
        None,
        "--peak-tflops",
        help="Explicit peak TFLOP/s (overrides --peak).",
        callback=options.positive(),
    ),
    duration_s: float | None = typer.Option(
        None,
        "--duration-s",
        help="Run length, for energy.",
        callback=options.duration_s(allow_zero=True),
    ),
    by: str = typer.Option(
        "auto",
        "--by",
        help="With --model bundled: 'auto' (cell within its MFU range, else per-(GPU, dtype)), 'cell', 'dtype', 'gpu'.",
    ),
    level: options.Level = 0.95,
    json_out: options.Json = False,
) -> None:
    """Predict mean power and energy of a planned run. With a prediction interval."""
    from flopwatch.powermodel.predict import predict_power

    out = predict_power(
        model=model,
        gpu=gpu,
        dtype=dtype,
        batch=batch,
        mfu=mfu,
        tokens_per_s=tokens_per_s,
        flops_per_token=flops_per_token,
        peak=peak,
        peak_tflops=peak_tflops,
        duration_s=duration_s,
        by=by,
        level=level,
    )
    pred, (lo, hi), mfu, reason = (
        out["power_w"],
        out["power_interval_w"],
        out["mfu_pct"],
        out["fallback_reason"],
    )
    if json_out:
        echo_json(out)
        return
    con = console()
    con.print(
        f"{gpu} {dtype} batch {batch} at MFU {mfu:.2f} %: power {pred:.1f} W "
        f"[{lo:.1f}, {hi:.1f}] ({level:.0%} prediction interval, {out['model_by']} model)"
    )
    if reason is not None:
        con.print(f"per-(GPU, dtype) model used: {reason}", style="dim")
    if out["extrapolated"]:
        con.print(
            f"warning: MFU outside the fitted range {out['fit_mfu_range_pct']}: extrapolating", style="yellow"
        )
    if duration_s is not None:
        e = out["energy_interval_j"]
        con.print(
            f"energy over {duration_s:g} s: {out['energy_j']:.4g} J [{e[0]:.4g}, {e[1]:.4g}] "
            f"= {out['energy_j'] / 3.6e6:.4g} kWh"
            + (
                f"; net of idle ({out['idle_power_w']:.1f} W): {out['net_energy_j']:.4g} J"
                if "net_energy_j" in out
                else ""
            )
        )


@pm_app.command("evaluate")
def evaluate_cmd(
    data: list[Path] | None = typer.Argument(
        None, metavar="CSV...", help="Aggregate CSVs (default: the bundled MASCOTS data)."
    ),
    gpu: list[str] | None = typer.Option(
        None, "--gpu", metavar="<gpu>", help="Only these GPUs (repeatable)."
    ),
    k: int = typer.Option(
        5,
        "--k",
        help="Folds of the grouped k-fold.",
        callback=options.count(ge=2),
    ),
    seed: options.Seed = 0,
    min_batch: options.MinBatch = 32,
    level: options.Level = 0.95,
    json_out: options.Json = False,
) -> None:
    """Out-of-sample accuracy of the power models and inverse. The inverse maps power to a FLOP rate."""
    from rich.table import Table

    from flopwatch.errors import InputError
    from flopwatch.powermodel.mfu import canonical_gpu
    from flopwatch.powermodel.oos import evaluate_inverse, evaluate_power_oos

    full = _load(data, keep_nan_mfu=True).df
    if gpu:
        want = set()
        for g in gpu:
            try:
                want.add(canonical_gpu(g))
            except InputError:
                want.add(g)
        full = full[full["gpu"].isin(want)]
        if full.empty:
            raise InputError(f"no runs for GPU(s) {', '.join(gpu)}", field="gpu")
    df = full[full["mfu_pct"].notna()]
    power = evaluate_power_oos(df, full, k=k, seed=seed)
    inv = evaluate_inverse(df, min_batch=min_batch, k=k, seed=seed, level=level)
    if json_out:
        echo_json({"power": power, "inverse": inv})
        return
    con = console()
    t = Table(
        title="MFU → power: MAPE % in-sample vs held out (per-GPU | per-(GPU, dtype) | per-cell model), and noise floor"
    )
    for h in (
        "GPU",
        "GPU in",
        "GPU LOMO",
        "GPU k-fold",
        "dtype in",
        "dtype LOMO",
        "dtype k-fold",
        "cell in",
        "cell LOMO",
        "cell k-fold",
        "cell k-fold (rows, leaky)",
        "noise SD %",
    ):
        t.add_column(h)
    for g, v in power["per_gpu"].items():
        t.add_row(
            g,
            *(
                fmt_num(v[key]["mape_pct"], 2)
                for key in (
                    "gpu_in_sample",
                    "gpu_lomo",
                    "gpu_kfold",
                    "dtype_in_sample",
                    "dtype_lomo",
                    "dtype_kfold",
                    "cell_in_sample",
                    "cell_lomo",
                    "cell_kfold",
                    "cell_kfold_rows",
                )
            ),
            fmt_num(v["noise_pct"], 2),
        )
    print_fit(con, t)
    t = Table(
        title=f"Inverse: FLOP rate from power (batch ≥ {min_batch}), held-out MAPE % and {level:.0%} upper bound"
    )
    for h in (
        "GPU",
        "features",
        "scheme",
        "known dtype",
        "unknown (pooled)",
        "bound cover (known)",
        "bound cost (known)",
        "bound cover (unknown)",
        "bound cost (unknown)",
    ):
        t.add_column(h)
    for g, v in inv["per_gpu"].items():
        for key, r in v.items():
            if not isinstance(r, dict):
                continue
            feat, sch = key.rsplit("_", 1)
            t.add_row(
                g,
                feat,
                sch,
                fmt_num(r["known_dtype"]["mape_pct"], 1),
                fmt_num(r["unknown_dtype_pooled"]["mape_pct"], 1),
                fmt_num(100 * r["bound_known_dtype"]["coverage"], 0) + " %",
                "+" + fmt_num(r["bound_known_dtype"]["median_overestimate_pct"], 0) + " %",
                fmt_num(100 * r["bound_unknown_dtype"]["coverage"], 0) + " %",
                "+" + fmt_num(r["bound_unknown_dtype"]["median_overestimate_pct"], 0) + " %",
            )
    print_fit(con, t)
    con.print(
        "cost = median (bound / true − 1). LOMO: leave one LLM out; k-fold: whole configurations held out.",
        style="dim",
    )


@pm_app.command("inverse")
def inverse_cmd(
    gpu: str = typer.Option(..., "--gpu", help="GPU name."),
    power_w: float = typer.Option(
        ...,
        "--power-w",
        help="Measured mean board power (W).",
        # no single board draws more (flopwatch.telemetry.plausibility.MAX_BOARD_POWER_W, cited there)
        callback=options.non_negative(le=5000.0, unit="W"),
    ),
    util_pct: float | None = typer.Option(
        None,
        "--util-pct",
        help="Mean GPU utilisation (%).",
        callback=options.in_range(0.0, 100.0, unit="%"),
    ),
    dtype: str | None = typer.Option(None, "--precision", help="Training dtype if known (else: unknown)."),
    duration_s: float | None = typer.Option(
        None,
        "--duration-s",
        help="Run length, for total FLOPs.",
        callback=options.duration_s(allow_zero=True),
    ),
    data: list[Path] | None = typer.Option(
        None, "--data", metavar="<csv>", help="Aggregate CSVs to fit on (default: bundled)."
    ),
    min_batch: options.MinBatch = 32,
    level: options.Level = 0.95,
    json_out: options.Json = False,
) -> None:
    """Estimate the FLOP rate and FLOPs from measured power. With a conservative upper bound."""
    from flopwatch.powermodel.oos import InverseModel

    df = _load(data).df
    m = InverseModel(min_batch=min_batch, level=level).fit(df)
    est = m.estimate(gpu, power_w, util_pct=util_pct, dtype=dtype)
    if duration_s is not None:
        est["duration_s"] = duration_s
        est["flops"] = est["flop_rate"] * duration_s
        est["upper_flops"] = est["upper_flop_rate"] * duration_s
    if json_out:
        echo_json(est)
        return
    con = console()
    con.print(
        f"{est['gpu']} at {power_w:.1f} W ({'dtype ' + est['dtype'] if est['dtype'] else 'dtype unknown'}): "
        f"{est['flop_rate'] / 1e12:.2f} TFLOP/s, {level:.0%} upper bound {est['upper_flop_rate'] / 1e12:.2f} TFLOP/s"
    )
    if est.get("extrapolated"):
        con.print(
            "warning: this power lies outside the range of the runs the model was fitted on "
            "(an extrapolation: the estimate and its bound are not supported by data)",
            style="yellow",
        )
    if duration_s is not None:
        con.print(f"over {duration_s:g} s: {est['flops']:.4g} FLOPs (upper bound {est['upper_flops']:.4g})")
    con.print(
        "Valid only in the compute-bound regime (large batches); see `flopwatch powermodel evaluate`.",
        style="dim",
    )


_X_LABEL = {"mfu_pct": "MFU (%)", "gpu_util_pct": "utilisation (%)"}


def fit_table(m: Any) -> Any:
    """A fitted power model as a table in the style of every other command (``m.summary()`` is the plain-text
    form for Python users)."""
    from rich.table import Table

    p = m.params
    keys = [str(n) for n in p.index.names]
    xl = _X_LABEL.get(m.x, m.x)
    t = Table(
        title=f"linear power model: power (W) = intercept + slope × {xl}, by {m.by} ({counted(len(p), 'group')}, {counted(m.nobs, 'run')})"
    )
    for c in keys:
        t.add_column(c)
    cols = ["intercept", "slope", "n", "r2", "mape_pct", "resid_sd_pct"]
    # human labels with units; --json keeps the column names above
    heads = ["intercept (W)", f"slope (W per {xl.split()[0]} %)", "runs", "R²", "MAPE %", "residual SD %"]
    for h in heads:
        t.add_column(h, justify="right")
    for k, (_, r) in zip(p.index, p.iterrows(), strict=True):
        kv = k if isinstance(k, tuple) else (k,)
        t.add_row(*(str(v) for v in kv), *(str(int(r[c])) if c == "n" else f"{r[c]:.4g}" for c in cols))
    if m.n_dropped:
        t.caption = f"{counted(m.n_dropped, 'row')} without power or {m.x} were dropped before fitting."
    return t


def register(app: typer.Typer) -> None:
    """Add ``powermodel`` to the root app."""
    app.add_typer(pm_app, name="powermodel")
