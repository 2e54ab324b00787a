"""CLI of the power-model area: ``flopwatch powermodel reproduce|fit|predict|evaluate|inverse`` and ``flopwatch bench``.

Heavy libraries (pandas, scipy, matplotlib, torch) are imported inside the commands.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import typer

pm_app = typer.Typer(
    help="MFU ⇄ power models after Enskat & Wiesner (MASCOTS 2026): reproduce, fit, predict, evaluate, inverse.",
    no_args_is_help=True,
)


def _json(obj: Any) -> str:
    def clean(v: Any) -> Any:
        if isinstance(v, float):
            return v if math.isfinite(v) else None
        if isinstance(v, dict):
            return {str(k): clean(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [clean(x) for x in v]
        if hasattr(v, "item"):
            return clean(v.item())
        return v

    return json.dumps(clean(obj), indent=2)


def _console():  # noqa: ANN202
    from rich.console import Console

    return Console()


def _fmt(v: float | None, d: int) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:.{d}f}"


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
    json_out: bool = typer.Option(
        False, "--json", help="Print the tables as JSON (contract: table2/table3)."
    ),
    figures: Path | None = typer.Option(
        None, "--figures", help="Write Figure 1 and Figure 4 (PNG) into DIR."
    ),
    n_boot: int = typer.Option(2000, "--n-boot", min=10, help="Bootstrap resamples."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
) -> None:
    """Tables II, III and IV of the MASCOTS study from the bundled data, next to the published values."""
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
        typer.echo(_json(d))
        return
    con = _console()
    cmp = {(c["table"], c["gpu"], c["column"]): c for c in r.comparison()}

    def cell(t: str, g: str, col: str, d: int) -> str:
        c = cmp[(t, g, col)]
        mark = {True: "[green]✓[/]", False: "[red]✗[/]", None: ""}[c["match"]]
        diff = "" if c["diff"] is None else f" ({c['diff']:+.{d + 1}f})"
        return f"{_fmt(c['ours'], d)} / {_fmt(c['published'], d)}{diff} {mark}"

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
    con.print(t2)
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
    con.print(t3)
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
    con.print(t4)
    con.print(f"[dim]Published values: {published.CITATION}.[/]")
    for n in r.notes:
        con.print(f"[dim]note: {n}[/]")
    con.print(f"[dim]computed in {r.seconds['total']:.2f} s (bootstrap {r.seconds['bootstrap']:.2f} s)[/]")
    for p in fig_paths:
        con.print(f"wrote {p}")


@pm_app.command("fit")
def fit_cmd(
    data: list[Path] = typer.Argument(
        ..., help="Aggregate CSV(s) in the MASCOTS schema (e.g. from `flopwatch bench`)."
    ),
    by: str = typer.Option(
        "gpu", "--by", help="Group fits by 'gpu', 'dtype' (gpu, dtype) or 'cell' (gpu, dtype, batch)."
    ),
    x: str = typer.Option("mfu_pct", "--x", help="Predictor: mfu_pct or gpu_util_pct."),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU name for files without a gpu column."),
    output: Path = typer.Option(..., "-o", "--output", help="Write the model JSON here."),
    json_out: bool = typer.Option(False, "--json", help="Print the model JSON to stdout too."),
) -> None:
    """Fit linear power models on aggregate CSVs and save them."""
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
        typer.echo(_json(m.to_dict()))
        return
    con = _console()
    con.print(m.summary())
    for n in loaded.notes:
        con.print(f"[dim]note: {n}[/]")
    con.print(f"wrote {output}")


@pm_app.command("predict")
def predict_cmd(
    model: str = typer.Option(
        "bundled", "--model", help="MODEL.json from `powermodel fit`, or 'bundled' (MASCOTS data)."
    ),
    gpu: str = typer.Option(..., "--gpu", help="GPU name (e.g. A100, L40, 'RTX 4070 Ti')."),
    dtype: str = typer.Option(..., "--dtype", help="fp32, fp16 or bf16."),
    batch: int = typer.Option(
        ..., "--batch", min=1, help="Batch size (per-cell models need a fitted batch)."
    ),
    mfu: float | None = typer.Option(None, "--mfu", help="Planned MFU in percent."),
    tokens_per_s: float | None = typer.Option(None, "--tokens-per-s", help="Planned throughput (tokens/s)."),
    flops_per_token: float | None = typer.Option(None, "--flops-per-token", help="Training FLOPs per token."),
    peak: str = typer.Option(
        "implied", "--peak", help="Peak table for MFU from tokens/s: implied|paper|datasheet."
    ),
    peak_tflops: float | None = typer.Option(
        None, "--peak-tflops", help="Explicit peak TFLOP/s (overrides --peak)."
    ),
    duration_s: float | None = typer.Option(None, "--duration-s", min=0.0, help="Run length, for energy."),
    by: str = typer.Option(
        "auto",
        "--by",
        help="With --model bundled: 'auto' (cell within its MFU range, else per-(GPU, dtype)), 'cell', 'dtype', 'gpu'.",
    ),
    level: float = typer.Option(0.95, "--level", min=0.5, max=0.999, help="Prediction-interval level."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Predict mean power (and energy) of a planned run, with a prediction interval."""
    from flopwatch.errors import InputError
    from flopwatch.powermodel.fit import PowerModelResult, fit_power_model
    from flopwatch.powermodel.mfu import mfu_pct, peak_flops

    if (mfu is None) == (tokens_per_s is None):
        raise InputError("give either --mfu or --tokens-per-s with --flops-per-token", field="mfu")
    if by not in ("auto", "gpu", "dtype", "cell"):
        raise InputError(f"--by must be auto, gpu, dtype or cell, got {by!r}", field="by")
    fallback = None
    if model == "bundled":
        loaded = _load(None)
        m = fit_power_model(loaded.df, by="cell" if by == "auto" else by, x="mfu_pct")
        if by == "auto":
            fallback = fit_power_model(loaded.df, by="dtype", x="mfu_pct")
    else:
        m = PowerModelResult.load(model)
    if m.x != "mfu_pct":
        raise InputError(f"model predicts from {m.x}, not MFU", file=model, field="x")
    if mfu is None:
        if flops_per_token is None or flops_per_token <= 0:
            raise InputError("--tokens-per-s needs a positive --flops-per-token", field="flops_per_token")
        try:
            pk = peak_tflops * 1e12 if peak_tflops else peak_flops(gpu, dtype, peak)
        except InputError as e:
            raise InputError(
                f"{e.detail}; for a GPU outside the MASCOTS set pass --peak-tflops (the peak the model's MFU used) "
                "or --mfu",
                field="peak",
            ) from None
        mfu = float(mfu_pct(tokens_per_s, flops_per_token, pk))
    if not 0 <= mfu <= 100:
        raise InputError(f"MFU must be within 0-100 %, got {mfu:.3g}", field="mfu")
    reason = None
    if fallback is not None:
        # A cell's slope rests on three models' MFU clusters: out of its MFU range it extrapolates badly
        # (docs/powermodel.md, out-of-sample section), so 'auto' uses the per-(GPU, dtype) fit there.
        try:
            r = m._row(gpu, dtype, batch)
            width = r["x_max"] - r["x_min"]
            if not (r["x_min"] - 0.25 * width <= mfu <= r["x_max"] + 0.25 * width):
                reason = f"MFU {mfu:.3g} % is outside the cell's range [{r['x_min']:.3g}, {r['x_max']:.3g}] %"
        except InputError:
            reason = f"no {dtype} batch-{batch} cell in the data"
        if reason is not None:
            m = fallback
    pred, lo, hi = m.predict_interval(gpu, dtype, batch, mfu, alpha=1 - level)
    row = m._row(gpu, dtype, batch)
    out: dict[str, Any] = {
        "gpu": gpu,
        "dtype": dtype,
        "batch_size": batch,
        "mfu_pct": mfu,
        "power_w": float(pred),
        "power_interval_w": [float(lo), float(hi)],
        "level": level,
        "model_by": m.by,
        "fallback_reason": reason,
        "extrapolated": not (row["x_min"] <= mfu <= row["x_max"]),
        "fit_mfu_range_pct": [float(row["x_min"]), float(row["x_max"])],
    }
    if duration_s is not None:
        out["duration_s"] = duration_s
        out["energy_j"] = float(pred) * duration_s
        # The interval is for the run's mean power; energy scales with the (known) duration.
        out["energy_interval_j"] = [float(lo) * duration_s, float(hi) * duration_s]
        from flopwatch.powermodel.mfu import canonical_gpu

        try:
            idle = m.idle_power_w.get(canonical_gpu(gpu))
        except InputError:
            idle = m.idle_power_w.get(gpu)
        if idle is not None:
            out["idle_power_w"] = idle
            out["net_energy_j"] = (float(pred) - idle) * duration_s
    if json_out:
        typer.echo(_json(out))
        return
    con = _console()
    con.print(
        f"{gpu} {dtype} batch {batch} at MFU {mfu:.2f} %: power {pred:.1f} W "
        f"[{lo:.1f}, {hi:.1f}] ({level:.0%} prediction interval, {m.by} model)"
    )
    if reason is not None:
        con.print(f"[dim]per-(GPU, dtype) model used: {reason}[/]")
    if out["extrapolated"]:
        con.print(
            f"[yellow]warning: MFU outside the fitted range {out['fit_mfu_range_pct']}: extrapolating[/]"
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
        None, help="Aggregate CSVs (default: the bundled MASCOTS data)."
    ),
    gpu: list[str] | None = typer.Option(None, "--gpu", help="Only these GPUs (repeatable)."),
    k: int = typer.Option(5, "--k", min=2, help="Folds of the grouped k-fold."),
    seed: int = typer.Option(0, "--seed"),
    min_batch: int = typer.Option(
        32, "--min-batch", min=1, help="Compute-bound regime for the inverse: batch ≥ this."
    ),
    level: float = typer.Option(
        0.95, "--level", min=0.5, max=0.999, help="Quantile of the conservative bound."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Out-of-sample accuracy of the power models and of the inverse (power → FLOP rate)."""
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
        typer.echo(_json({"power": power, "inverse": inv}))
        return
    con = _console()
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
                _fmt(v[key]["mape_pct"], 2)
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
            _fmt(v["noise_pct"], 2),
        )
    con.print(t)
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
                _fmt(r["known_dtype"]["mape_pct"], 1),
                _fmt(r["unknown_dtype_pooled"]["mape_pct"], 1),
                _fmt(100 * r["bound_known_dtype"]["coverage"], 0) + " %",
                "+" + _fmt(r["bound_known_dtype"]["median_overestimate_pct"], 0) + " %",
                _fmt(100 * r["bound_unknown_dtype"]["coverage"], 0) + " %",
                "+" + _fmt(r["bound_unknown_dtype"]["median_overestimate_pct"], 0) + " %",
            )
    con.print(t)
    con.print(
        "[dim]cost = median (bound / true − 1). LOMO: leave one LLM out; k-fold: whole configurations held out.[/]"
    )


@pm_app.command("inverse")
def inverse_cmd(
    gpu: str = typer.Option(..., "--gpu", help="GPU name."),
    power_w: float = typer.Option(..., "--power-w", min=0.0, help="Measured mean board power (W)."),
    util_pct: float | None = typer.Option(
        None, "--util-pct", min=0.0, max=100.0, help="Mean GPU utilisation (%)."
    ),
    dtype: str | None = typer.Option(None, "--dtype", help="Training dtype if known (else: unknown)."),
    duration_s: float | None = typer.Option(
        None, "--duration-s", min=0.0, help="Run length, for total FLOPs."
    ),
    data: list[Path] | None = typer.Option(
        None, "--data", help="Aggregate CSVs to fit on (default: bundled)."
    ),
    min_batch: int = typer.Option(32, "--min-batch", min=1),
    level: float = typer.Option(0.95, "--level", min=0.5, max=0.999),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Estimate the FLOP rate (and total FLOPs) from measured power, with a conservative upper bound."""
    from flopwatch.powermodel.oos import InverseModel

    df = _load(data).df
    m = InverseModel(min_batch=min_batch, level=level).fit(df)
    est = m.estimate(gpu, power_w, util_pct=util_pct, dtype=dtype)
    if duration_s is not None:
        est["duration_s"] = duration_s
        est["flops"] = est["flop_rate"] * duration_s
        est["upper_flops"] = est["upper_flop_rate"] * duration_s
    if json_out:
        typer.echo(_json(est))
        return
    con = _console()
    con.print(
        f"{est['gpu']} at {power_w:.1f} W ({'dtype ' + est['dtype'] if est['dtype'] else 'dtype unknown'}): "
        f"{est['flop_rate'] / 1e12:.2f} TFLOP/s, {level:.0%} upper bound {est['upper_flop_rate'] / 1e12:.2f} TFLOP/s"
    )
    if est.get("extrapolated"):
        con.print(
            "[yellow]warning: this power lies outside the range of the runs the model was fitted on "
            "(an extrapolation: the estimate and its bound are not supported by data)[/]"
        )
    if duration_s is not None:
        con.print(f"over {duration_s:g} s: {est['flops']:.4g} FLOPs (upper bound {est['upper_flops']:.4g})")
    con.print(
        "[dim]Valid only in the compute-bound regime (large batches); see `flopwatch powermodel evaluate`.[/]"
    )


def _grid_configs(
    sweep: str | None, arch: str, d_model: int | None, seq_len: int | None, num_layers: int | None,
    nhead: int | None, batches: str, dtypes: str, label: list[str] | None,
) -> list[Any]:  # fmt: skip
    from flopwatch.errors import ConfigError
    from flopwatch.workloads.config import make_config
    from flopwatch.workloads.sweeps import get_sweep

    if sweep:
        cfgs = get_sweep(sweep)
        if label:
            unknown = [lb for lb in label if lb not in {c.name for c in cfgs}]
            if unknown:
                raise ConfigError(
                    f"no config labelled {', '.join(unknown)} in sweep {sweep!r}", field="label"
                )
            cfgs = [c for c in cfgs if c.name in set(label)]
        return cfgs
    if d_model is None or seq_len is None:
        raise ConfigError(
            "give --sweep NAME, or --d-model and --seq-len (with --batch/--dtype lists)", field="sweep"
        )

    def ints(v: str, name: str) -> list[int]:
        try:
            return [int(x) for x in v.split(",") if x.strip()]
        except ValueError:
            raise ConfigError(
                f"--{name} must be a comma-separated list of integers, got {v!r}", field=name
            ) from None

    out = []
    for dt in [x.strip() for x in dtypes.split(",") if x.strip()]:
        for b in ints(batches, "batch"):
            out.append(
                make_config(
                    arch,
                    d_model=d_model,
                    seq_len=seq_len,
                    num_layers=num_layers,
                    nhead=nhead,
                    batch_size=b,
                    precision=dt,
                )
            )
    return out


def bench_cmd(
    output: Path = typer.Option(..., "-o", "--output", help="Aggregate CSV to write (MASCOTS schema)."),
    device: str = typer.Option(
        "cpu", "--device", help="cpu, cuda, cuda:N, or sim:KEY (simulated, virtual time)."
    ),
    sensor: str | None = typer.Option(
        None,
        "--sensor",
        help="Telemetry spec (nvml, rapl, replay:FILE …); default nvml on CUDA, none on CPU.",
    ),
    sweep: str | None = typer.Option(None, "--sweep", help="Named workload sweep (e.g. quick, datacenter)."),
    label: list[str] | None = typer.Option(
        None, "--label", help="Only these configs of the sweep (repeatable)."
    ),
    arch: str = typer.Option("gpt", "--arch", help="Grid mode: gpt or seed-encoder."),
    d_model: int | None = typer.Option(None, "--d-model"),
    seq_len: int | None = typer.Option(None, "--seq-len"),
    num_layers: int | None = typer.Option(None, "--num-layers"),
    nhead: int | None = typer.Option(None, "--nhead"),
    batch: str = typer.Option("1,8,32", "--batch", help="Grid mode: comma-separated batch sizes."),
    dtype: str = typer.Option("fp32", "--dtype", help="Grid mode: comma-separated dtypes."),
    repeats: int = typer.Option(1, "--repeats", min=1, help="Repeats per configuration (noise floor)."),
    window_s: float = typer.Option(
        1.0, "--window-s", help="Minimum device-timed length of one sample window."
    ),
    min_samples: int = typer.Option(50, "--min-samples", help="Windows before the CI rule may stop."),
    max_samples: int = typer.Option(500, "--max-samples", help="Hard cap on windows per configuration."),
    rel_ci: float = typer.Option(0.05, "--rel-ci", help="Stop when the 95 % CI half-width ≤ this × mean."),
    warmup_steps: int = typer.Option(5, "--warmup-steps"),
    cooldown_s: float = typer.Option(5.0, "--cooldown-s"),
    rate_hz: float = typer.Option(10.0, "--rate-hz", help="Telemetry sampling rate."),
    seed: int = typer.Option(0, "--seed"),
    append: bool = typer.Option(False, "--append", help="Append to an existing CSV of the same schema."),
    fit: bool = typer.Option(False, "--fit", help="Fit power ~ MFU on the measured rows afterwards."),
    json_out: bool = typer.Option(False, "--json", help="Print the rows as JSON."),
) -> None:
    """Measure MFU, utilisation and power per configuration with the MASCOTS protocol; write aggregate CSV rows."""
    from flopwatch.errors import InputError
    from flopwatch.powermodel.bench import BenchSettings, bench_grid, bench_grid_sim, write_aggregate_csv

    settings = BenchSettings(
        window_s=window_s, min_samples=min_samples, max_samples=max_samples, rel_ci=rel_ci,
        warmup_steps=warmup_steps, cooldown_s=cooldown_s, rate_hz=rate_hz,
    )  # fmt: skip
    configs = _grid_configs(sweep, arch, d_model, seq_len, num_layers, nhead, batch, dtype, label)
    if output.is_dir():
        raise InputError("is a directory; give a CSV file path", file=str(output), field="output")
    if not output.expanduser().resolve().parent.is_dir():
        raise InputError("directory does not exist", file=str(output), field="output")
    if output.exists() and output.stat().st_size > 0 and not append:
        raise InputError("exists; refusing to overwrite (use --append)", file=str(output))
    state = {"append": append}
    con = None if json_out else _console()
    if window_s < 1.0:
        # Not the study's protocol (>= 1 s windows); allowed for quick checks, said so on stderr.
        typer.echo(
            f"flopwatch: warning: --window-s {window_s:g} is shorter than the protocol's 1 s windows; "
            "rows record window_s_mean",
            err=True,
        )

    def on_row(row: dict[str, Any]) -> None:
        # Each configuration is written as soon as it is measured: an interrupted grid keeps what it measured.
        write_aggregate_csv([row], output, append=state["append"])
        state["append"] = True
        if con is not None:
            con.print(
                f"{row['model_name']} b{row['batch_size']} {row['dtype']} rep {row['repeat']}: "
                f"MFU {row['mfu_percentage_hardware_flops_mean']:.3g} % (hardware FLOPs), util {_fmt(row['gpu_utilization_mean'], 1)} %, "
                f"power {_fmt(row['power_draw_watts_mean'], 1)} W, {row['samples_per_config']} windows ({row['stop_reason']})"
                + (" [simulated]" if row["simulated"] else "")
            )

    if device.startswith("sim"):
        rows = bench_grid_sim(
            configs, spec=device, settings=settings, repeats=repeats, seed=seed, on_row=on_row
        )
    else:
        spec = sensor
        if spec is None and device.startswith("cuda"):
            from flopwatch.powermodel.bench import nvml_spec_for
            from flopwatch.workloads.run import parse_device

            parse_device(device)
            import torch

            if not torch.cuda.is_available():
                raise InputError("device 'cuda' requested but torch sees no CUDA device", field="device")
            spec = nvml_spec_for(device)  # the workload's own GPU, not every GPU NVML sees
        if spec is None and con is not None:
            con.print("[yellow]no --sensor on the CPU: power is not measured (MFU and step timing only)[/]")
        rows = bench_grid(
            configs, device=device, sensor_spec=None if spec == "none" else spec, settings=settings,
            repeats=repeats, seed=seed, on_row=on_row,
        )  # fmt: skip
    result: dict[str, Any] = {"output": str(output), "rows": rows}
    if fit:
        from flopwatch.powermodel.datasets import load_aggregates
        from flopwatch.powermodel.fit import fit_power_model

        loaded = load_aggregates([output])
        if len(loaded.df) >= 3:
            m = fit_power_model(loaded.df, by="gpu")
            result["fit"] = m.to_dict()
            if con is not None:
                con.print(m.summary())
        elif con is not None:
            con.print("[yellow]fewer than 3 rows with power: no fit[/]")
    if json_out:
        typer.echo(_json(result))
    elif con is not None:
        con.print(f"wrote {len(rows)} row(s) to {output}")


def register(app: typer.Typer) -> None:
    """Add ``powermodel`` and ``bench`` to the root app."""
    app.add_typer(pm_app, name="powermodel")
    app.command("bench")(bench_cmd)
