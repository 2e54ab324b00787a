"""How well the simulated twins reproduce the data they are grounded on (``flopwatch sim validate``).

:func:`replay_mascots` replays every MASCOTS run of one GPU on its twin: the run's *measured* MFU and utilisation
are imposed (:meth:`SimulatedAccelerator.run_condition`), the twin's sensor is read the way the study read NVML
(Δ energy counter over the window), and simulated mean power is compared with the published mean power per run and
per (dtype, batch) cell. :func:`batch1_floor` shows the memory-bound floor through the full roofline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from flopwatch.errors import InputError
from flopwatch.sim.accelerator import RawWorkload, SimulatedAccelerator
from flopwatch.sim.artefacts import SensorReadout

#: gpt2-xl as the MASCOTS study ran it: 48 layers, d_model 1600, 1.56e9 parameters; calflops FLOPs per step at
#: batch 1 (11 tokens) from the aggregate rows (``calflops_total_mean``).
GPT2XL = {"layers": 48, "d_model": 1600, "params": 1.56e9, "flops_b1": 1.0278e11}


@dataclass(frozen=True)
class ReplayResult:
    gpu: str
    rows: Any  # pandas DataFrame: one row per MASCOTS run, with p_sim
    cells: Any  # per (dtype, batch_size): published and simulated mean power
    cell_mape_pct: float
    row_mape_pct: float
    cell_max_abs_pct: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "n_runs": int(len(self.rows)),
            "n_cells": int(len(self.cells)),
            "cell_mape_pct": self.cell_mape_pct,
            "cell_max_abs_pct": self.cell_max_abs_pct,
            "row_mape_pct": self.row_mape_pct,
            "cells": [
                {
                    "dtype": d,
                    "batch_size": int(b),
                    "published_w": float(r["pub"]),
                    "simulated_w": float(r["sim"]),
                    "err_pct": float(r["err_pct"]),
                }
                for (d, b), r in self.cells.iterrows()
            ],
            "simulated": True,
        }


def replay_mascots(
    gpu: str = "A100", *, seed: int = 0, duration_s: float = 50.0, holdout_model: str | None = None
) -> ReplayResult:
    """Replay every MASCOTS run of ``gpu`` on its twin and compare mean power (see the module docstring).

    In sample, the per-cell lines were fitted on these very runs, so the cell means agree by construction up to the
    activity scaling, clipping, the injected noise and the sensor read-out. ``holdout_model`` makes it a real test:
    the cell lines are refitted without that architecture and only its runs are replayed (out of sample).
    """
    from flopwatch.powermodel.datasets import load_mascots
    from flopwatch.powermodel.device_power import build_power_model
    from flopwatch.powermodel.mfu import GPU_DEVICE_KEYS, canonical_gpu

    g = canonical_gpu(gpu)
    df = load_mascots(g)
    acc = SimulatedAccelerator(GPU_DEVICE_KEYS[g], seed=seed)
    if holdout_model is not None:
        if holdout_model not in set(df["model"]):
            raise InputError(f"{holdout_model!r} is not a MASCOTS {g} model", field="holdout_model")
        acc.power_model = build_power_model(acc.spec.key, exclude_models=(holdout_model,))
        df = df[df["model"] == holdout_model].reset_index(drop=True)
    runs = []
    for r in df.itertuples():
        acc.idle(5.0)
        runs.append(
            acc.run_condition(
                str(r.model),
                dtype=str(r.dtype),
                tokens_per_step=11 * float(r.batch_size),
                mfu_pct=float(r.mfu_pct),
                util=float(r.gpu_util_pct) / 100.0,
                duration_s=duration_s,
                step_time_s=float(r.step_time_s),
            )
        )
    ro = SensorReadout(acc, seed=seed)
    sim = []
    for run in runs:  # the study's way: Δ(energy counter) / window, after a 1 s settle
        e0 = ro.read_one(run.start_s + 1.0)["energy_j"]
        e1 = ro.read_one(run.end_s)["energy_j"]
        sim.append((e1 - e0) / (run.duration_s - 1.0))
    d = df.assign(p_sim=sim)
    cells = d.groupby(["dtype", "batch_size"]).agg(pub=("power_w", "mean"), sim=("p_sim", "mean"))
    cells["err_pct"] = (cells["sim"] - cells["pub"]) / cells["pub"] * 100.0
    return ReplayResult(
        gpu=g,
        rows=d,
        cells=cells,
        cell_mape_pct=float(cells["err_pct"].abs().mean()),
        row_mape_pct=float((abs(d["p_sim"] - d["power_w"]) / d["power_w"]).mean() * 100.0),
        cell_max_abs_pct=float(cells["err_pct"].abs().max()),
    )


def leave_one_model_out(gpu: str = "A100", *, seed: int = 0) -> dict[str, Any]:
    """Out-of-sample grounding: each MASCOTS architecture replayed on cell lines fitted without it."""
    from flopwatch.powermodel.datasets import load_mascots
    from flopwatch.powermodel.mfu import canonical_gpu

    g = canonical_gpu(gpu)
    per = {}
    errs = []
    for m in sorted(set(load_mascots(g)["model"])):
        r = replay_mascots(g, seed=seed, holdout_model=m)
        per[m] = {"cell_mape_pct": r.cell_mape_pct, "cell_max_abs_pct": r.cell_max_abs_pct}
        errs += list(r.cells["err_pct"].abs())
    return {
        "gpu": g,
        "cell_mape_pct": float(np.mean(errs)),
        "cell_max_abs_pct": float(np.max(errs)),
        "by_model": per,
        "simulated": True,
    }


def gpt2xl_workload(batch: int, dtype: str = "bf16") -> RawWorkload:
    """gpt2-xl at ``batch`` × 11 tokens, as in the MASCOTS runs (bytes: ~12 passes over the weights and AdamW
    state, plus activations)."""
    tokens = 11 * batch
    bpp = 4 if dtype in ("fp32", "tf32") else 2
    nbytes = GPT2XL["params"] * bpp * 12 + tokens * GPT2XL["layers"] * GPT2XL["d_model"] * 40 * bpp
    return RawWorkload(
        label=f"gpt2-xl-b{batch}-{dtype}",
        flops_per_step=GPT2XL["flops_b1"] * batch,
        bytes_per_step=nbytes,
        tokens_per_step=tokens,
        batch_size=batch,
        dtype=dtype,
        num_layers=int(GPT2XL["layers"]),
    )


def batch1_floor(device: str = "a100", dtype: str = "bf16") -> dict[str, Any]:
    """The memory-bound floor: gpt2-xl at batch 1 vs 128 through the full roofline, against idle power."""
    acc = SimulatedAccelerator(device, seed=0)
    out: dict[str, Any] = {
        "device": acc.spec.key,
        "dtype": dtype,
        "idle_power_w": acc.idle_power_w,
        "simulated": True,
    }
    for b in (1, 8, 32, 128):
        p = acc.operating_point(gpt2xl_workload(b, dtype))
        out[f"batch_{b}"] = {
            "mfu_pct": 100 * p.mfu,
            "power_w": p.power_w,
            "util": p.util,
            "bound": p.bound,
            "power_over_idle": p.power_w / acc.idle_power_w,
        }
    out["floor_w_at_mfu_0"] = acc.power_model.power_w(dtype, 11, 0.0, util=1.0)
    return out


def roofline_vs_mascots(gpu: str = "A100") -> dict[str, Any]:
    """The twin's roofline on the three MASCOTS models vs the measured step time, MFU and power (end to end)."""
    from flopwatch.powermodel.datasets import load_mascots
    from flopwatch.powermodel.mfu import GPU_DEVICE_KEYS, canonical_gpu

    models = {  # parameters, layers, d_model (HF configs)
        "Qwen/Qwen2.5-3B": (3.09e9, 36, 2048),
        "Qwen/Qwen2.5-1.5B": (1.54e9, 28, 1536),
        "gpt2-xl": (1.56e9, 48, 1600),
        "microsoft/DialoGPT-large": (7.74e8, 36, 1280),
    }
    g = canonical_gpu(gpu)
    df = load_mascots(g)
    acc = SimulatedAccelerator(GPU_DEVICE_KEYS[g], seed=0)
    grp = df.groupby(["model", "dtype", "batch_size"]).agg(
        p=("power_w", "mean"),
        mfu=("mfu_pct", "mean"),
        st=("step_time_s", "mean"),
        fl=("flops_per_step", "mean"),
    )
    rows = []
    for (model, dtype, b), r in grp.iterrows():
        if model not in models:
            continue
        n, layers, dm = models[model]
        bpp = 4 if dtype == "fp32" else 2
        tokens = 11 * int(b)
        # MASCOTS fp32 MFUs imply TF32 tensor cores (SOURCE.md): run them as tf32 on the twin.
        wl = RawWorkload(
            label=str(model),
            flops_per_step=float(r["fl"]),
            bytes_per_step=n * bpp * 12 + tokens * layers * dm * 40 * bpp,
            tokens_per_step=tokens,
            batch_size=int(b),
            dtype="tf32" if dtype == "fp32" and acc.spec.supports("tf32") else str(dtype),
            num_layers=layers,
        )
        p = acc.operating_point(wl)
        rows.append(
            (
                p.power_w / r["p"] - 1,
                np.log(p.power_model_mfu_pct / r["mfu"]),
                np.log(p.step_time_s / r["st"]),
            )
        )
    a = np.array(rows)
    return {
        "gpu": g,
        "n_configs": len(rows),
        "power_mape_pct": float(np.mean(np.abs(a[:, 0])) * 100),
        "mfu_median_abs_log_ratio": float(np.median(np.abs(a[:, 1]))),
        "step_time_median_abs_log_ratio": float(np.median(np.abs(a[:, 2]))),
        "simulated": True,
    }


def validate_twins(gpus: list[str] | tuple[str, ...], *, seed: int = 0) -> dict[str, Any]:
    """Everything ``flopwatch sim validate`` reports: per GPU the replay, the leave-one-model-out replay and the
    roofline check, plus the A100 batch-1 floor. Labelled simulated."""
    out: dict[str, Any] = {
        "replay": [],
        "leave_one_model_out": [],
        "roofline": [],
        "batch1_floor": batch1_floor("a100"),
        "simulated": True,
    }
    for g in gpus:
        out["replay"].append(replay_mascots(g, seed=seed).to_dict())
        out["leave_one_model_out"].append(leave_one_model_out(g, seed=seed))
        out["roofline"].append(roofline_vs_mascots(g))
    return out
