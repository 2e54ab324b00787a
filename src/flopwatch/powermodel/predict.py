"""Predict the mean power (and energy) of a planned training run from its MFU (``flopwatch powermodel predict``).

After Enskat & Wiesner (MASCOTS 2026): power is linear in MFU within a (GPU, dtype, batch) cell. With the bundled
data, ``by='auto'`` uses the cell's line inside its MFU range and the per-(GPU, dtype) line outside it.
"""

from __future__ import annotations

from typing import Any

from flopwatch.errors import InputError
from flopwatch.powermodel.datasets import load_aggregates
from flopwatch.powermodel.fit import PowerModelResult, fit_power_model
from flopwatch.powermodel.mfu import canonical_gpu, mfu_pct, peak_flops

#: Fewest runs a linear power model predicts from: two points fit any line exactly and leave no residual to
#: size the interval with (Student t with n − 2 degrees of freedom).
MIN_FIT_RUNS = 3


def predict_power(
    *,
    model: str = "bundled",
    gpu: str,
    dtype: str,
    batch: int,
    mfu: float | None = None,
    tokens_per_s: float | None = None,
    flops_per_token: float | None = None,
    peak: str = "implied",
    peak_tflops: float | None = None,
    duration_s: float | None = None,
    by: str = "auto",
    level: float = 0.95,
) -> dict[str, Any]:
    """Mean power of a planned run with its ``level`` prediction interval; with ``duration_s`` also energy.

    ``model`` is a MODEL.json from ``powermodel fit`` or ``"bundled"`` (fitted on the MASCOTS data). The MFU is
    given (percent) or computed from ``tokens_per_s × flops_per_token`` against a peak. Returns a JSON-ready dict
    (keys: gpu, dtype, batch_size, mfu_pct, power_w, power_interval_w, level, model_by, fallback_reason,
    extrapolated, fit_mfu_range_pct, and the energy keys).
    """
    if (mfu is None) == (tokens_per_s is None):
        raise InputError("give either --mfu or --tokens-per-s with --flops-per-token", field="mfu")
    if by not in ("auto", "gpu", "dtype", "cell"):
        raise InputError(f"--by must be auto, gpu, dtype or cell, got {by!r}", field="by")
    fallback = None
    if model == "bundled":
        loaded = load_aggregates(None)
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
            if bool(r["degenerate"]) or int(r["n"]) < MIN_FIT_RUNS:
                reason = f"the cell was fitted on {int(r['n'])} run(s) at {'one MFU' if r['degenerate'] else 'few MFUs'}"
            elif not (r["x_min"] - 0.25 * width <= mfu <= r["x_max"] + 0.25 * width):
                reason = f"MFU {mfu:.3g} % is outside the cell's range [{r['x_min']:.3g}, {r['x_max']:.3g}] %"
        except InputError:
            reason = f"no {dtype} batch-{batch} cell in the data"
        if reason is not None:
            m = fallback
    row = m._row(gpu, dtype, batch)
    if bool(row["degenerate"]) or int(row["n"]) < MIN_FIT_RUNS:
        # one MFU value leaves the slope unknown, two runs leave no residual: the "interval" came out as
        # [nan, nan] or zero-width around a guess (identical rows), with exit 0
        raise InputError(
            f"the model for {gpu} was fitted on {int(row['n'])} run(s)"
            f"{' at a single MFU' if row['degenerate'] else ''}: its slope or its spread is unknown, so it "
            f"cannot predict (fit on at least {MIN_FIT_RUNS} runs at different MFUs)",
            file=None if model == "bundled" else str(model),
            field="model",
        )
    pred, lo, hi = m.predict_interval(gpu, dtype, batch, mfu, alpha=1 - level)
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
        try:
            idle = m.idle_power_w.get(canonical_gpu(gpu))
        except InputError:
            idle = m.idle_power_w.get(gpu)
        if idle is not None:
            out["idle_power_w"] = idle
            out["net_energy_j"] = (float(pred) - idle) * duration_s
    return out
