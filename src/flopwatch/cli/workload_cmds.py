"""``flopwatch workload flops|run|sweeps``: training workloads with exact ground-truth FLOPs.

Config options (contract, shared by ``flops`` and ``run``): ``--arch seed-encoder|gpt --d-model --nhead
--num-layers --dim-feedforward --batch-size --seq-len --steps --optimizer --precision [--vocab-size]``,
or ``--sweep NAME --label LABEL`` for a named configuration. torch is imported inside the commands.
"""

from __future__ import annotations

from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, counted, echo_json, new_app
from flopwatch.errors import ConfigError

workload_app = new_app("Training workloads with exact ground-truth FLOPs.")

_ARCH = typer.Option("seed-encoder", "--arch", help="Model family: seed-encoder (the Jetson study's) or gpt.")
_FF = typer.Option(
    None,
    "--dim-feedforward",
    help="MLP width (seed-encoder default 512, gpt 4·d_model).",
    callback=options.count(ge=1),
)
_BATCH = typer.Option(
    None,
    "--batch-size",
    help="Sequences per step.",
    callback=options.count(ge=1),
)
_STEPS = typer.Option(
    None,
    "--steps",
    help="Training steps (timed steps for `run`).",
    callback=options.count(ge=1),
)
_OPT = typer.Option(None, "--optimizer", help="adamw (lr 1e-4) or sgd (momentum 0.9).")
_PREC = typer.Option(
    None, "--precision", help="fp32 (TF32 off), tf32, fp16 (+GradScaler) or bf16 (autocast)."
)
_VOCAB = typer.Option(
    None,
    "--vocab-size",
    help="Vocabulary size (gpt only; default 8192).",
    callback=options.count(ge=1),
)
_SWEEP = typer.Option(None, "--sweep", help="Named sweep (see `flopwatch workload sweeps`).")
_LABEL = typer.Option(None, "--label", help="Label of a configuration in --sweep, e.g. d256_b16_s128_L3.")


@workload_app.command("flops")
def flops_cmd(
    arch: str = _ARCH,
    d_model: options.DModel = None,
    nhead: options.NHead = None,
    num_layers: options.NumLayers = None,
    dim_feedforward: int | None = _FF,
    batch_size: int | None = _BATCH,
    seq_len: options.SeqLen = None,
    steps: int | None = _STEPS,
    optimizer: str | None = _OPT,
    precision: str | None = _PREC,
    vocab_size: int | None = _VOCAB,
    sweep: str | None = _SWEEP,
    label: str | None = _LABEL,
    attention: str = typer.Option("fused", "--attention", help="fused (3.5x fwd, the study's) or math (3x)."),
    as_json: options.Json = False,
) -> None:
    """Ground-truth FLOPs per training step. FlopCounterMode on the meta device; nothing is trained."""
    from flopwatch.workloads.select import select_config  # not on the help path

    cfg = select_config(
        arch=arch, d_model=d_model, nhead=nhead, num_layers=num_layers, dim_feedforward=dim_feedforward,
        batch_size=batch_size, seq_len=seq_len, steps=steps, optimizer=optimizer, precision=precision,
        vocab_size=vocab_size, sweep=sweep, label=label,
    )  # fmt: skip
    from flopwatch.workloads import formulas
    from flopwatch.workloads.ground_truth import count_flops

    fc = count_flops(cfg, attention=attention)
    out: dict[str, Any] = {
        "label": cfg.name,
        "arch": cfg.arch,
        "config": cfg.to_dict(),
        "flops_per_step": fc.flops_per_step,
        "matmul_flops_per_step": fc.matmul_flops_per_step,
        "attention_flops_per_step": fc.attention_flops_per_step,
        "other_flops_per_step": fc.other_flops_per_step,
        "attention_convention": fc.attention_convention,
        "attention_forward_flops_per_step": fc.attention_forward_flops_per_step,
        "optimizer_flops_per_step": fc.optimizer_flops_per_step,
        "elementwise_flops_per_step": fc.elementwise_flops_per_step,
        "params": fc.params,
        "steps": cfg.steps,
        "total_flops": fc.total(cfg.steps),
        "bytes_per_step": formulas.bytes_per_step(cfg, attention),
        "formulas": {
            "palm_flops_per_step": formulas.palm_flops_per_step(cfg),
            "chinchilla_flops_per_step": formulas.chinchilla_flops_per_step(cfg),
            "megatron_flops_per_step": formulas.megatron_flops_per_step(cfg),
        },
        "method": fc.method,
    }
    if as_json:
        echo_json(out, indent=None)
        return
    from rich.table import Table

    t = Table(title=f"{cfg.name} ({cfg.arch}, {cfg.precision}, attention={fc.attention_convention})")
    t.add_column("quantity")
    t.add_column("FLOPs", justify="right")
    t.add_column("note")
    t.add_row("FLOPs per step", f"{fc.flops_per_step:.6e}", "ground truth (FlopCounterMode, meta device)")
    t.add_row("  matmul", f"{fc.matmul_flops_per_step:.6e}", "linear layers fwd+bwd")
    t.add_row("  attention", f"{fc.attention_flops_per_step:.6e}",
              f"{'3.5' if attention == 'fused' else '3'}x forward {fc.attention_forward_flops_per_step:.4e}")  # fmt: skip
    t.add_row("  other", f"{fc.other_flops_per_step:.6e}", "other counted ops")
    t.add_row(
        f"total × {counted(cfg.steps, 'step')}",
        f"{fc.total(cfg.steps):.6e}",
        f"{fc.total(cfg.steps) / 1e12:.4f} TFLOP",
    )
    t.add_row("optimizer (not in total)", f"{fc.optimizer_flops_per_step:.4e}", f"{cfg.optimizer}, analytic")
    t.add_row("element-wise (not in total)", f"{fc.elementwise_flops_per_step:.4e}", "coarse estimate")
    for k, v in out["formulas"].items():
        rel = (v - fc.flops_per_step) / fc.flops_per_step * 100
        t.add_row(f"{k.removesuffix('_flops_per_step')} formula", f"{v:.6e}", f"{rel:+.2f} % vs ground truth")
    t.add_row("DRAM bytes/step (estimate)", f"{out['bytes_per_step']:.4e}", f"params {fc.params:,}")
    console().print(t)


@workload_app.command("run")
def run_cmd(
    arch: str = _ARCH,
    d_model: options.DModel = None,
    nhead: options.NHead = None,
    num_layers: options.NumLayers = None,
    dim_feedforward: int | None = _FF,
    batch_size: int | None = _BATCH,
    seq_len: options.SeqLen = None,
    steps: int | None = _STEPS,
    optimizer: str | None = _OPT,
    precision: str | None = _PREC,
    vocab_size: int | None = _VOCAB,
    sweep: str | None = _SWEEP,
    label: str | None = _LABEL,
    device: str = typer.Option("auto", "--device", help="cpu, cuda, cuda:N or auto (cuda when available)."),
    seconds: float | None = typer.Option(
        None,
        "--seconds",
        help="Train for this long instead of --steps.",
        callback=options.duration_s(),
    ),
    warmup: int = typer.Option(
        5,
        "--warmup",
        help="Untimed warm-up steps.",
        callback=options.count(ge=0, le=options.MAX_COUNT),
    ),
    records: str | None = typer.Option(None, "--records", help="Append the record to this JSONL file."),
    attention: str | None = typer.Option(None, "--attention", help="fused (CUDA default) or math (CPU)."),
    seed: options.Seed = 0,
    mfu_convention: str = typer.Option(
        "hardware",
        "--mfu-convention",
        help="MFU from hardware FLOPs (counted, attention recompute included) or model FLOPs (PaLM-style: "
        "no recompute, causal attention halved); the record keeps both.",
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar on stderr."),
    as_json: options.Json = False,
) -> None:
    """Train a workload and append one record. Timestamps, FLOPs, achieved FLOP/s, MFU, step times."""
    options.not_inputs([("--records", records)], [])  # before training: a directory or FIFO is refused now
    from flopwatch.workloads.select import select_config  # not on the help path

    cfg = select_config(
        arch=arch, d_model=d_model, nhead=nhead, num_layers=num_layers, dim_feedforward=dim_feedforward,
        batch_size=batch_size, seq_len=seq_len, steps=None if seconds is not None else steps,
        optimizer=optimizer, precision=precision, vocab_size=vocab_size, sweep=sweep, label=label,
    )  # fmt: skip
    if steps is not None and seconds is not None:
        raise ConfigError("give either --steps or --seconds, not both", field="seconds")
    from flopwatch.workloads.run import progress_bar, resolve_device, run_workload

    with progress_bar(progress) as on_progress:
        rec = run_workload(
            cfg,
            resolve_device(device),
            steps=steps,
            seconds=seconds,
            warmup=warmup,
            records=records,
            seed=seed,
            attention=attention,
            mfu_convention=mfu_convention,
            progress=on_progress,
        )
    if as_json:
        echo_json(rec, indent=None)
        return
    from rich.table import Table

    st = rec["step_time_s"] or {}
    t = Table(title=f"{rec['label']} on {rec['device']} ({rec['device_name']})")
    t.add_column("quantity")  # human labels with units; --json keeps the record's field names
    t.add_column("value", justify="right")
    rows = [
        ("steps", f"{rec['steps']}"),
        ("duration (s)", f"{rec['duration_s']:.3f}"),
        ("FLOPs per step", f"{rec['flops_per_step']:.6e}"),
        ("total FLOPs", f"{rec['total_flops']:.6e}"),
        ("achieved TFLOP/s", "n/a" if rec["achieved_flops_per_s"] is None else f"{rec['achieved_flops_per_s'] / 1e12:.4f}"),
        (f"MFU ({rec['mfu_convention']} FLOPs)", "n/a" if rec["mfu"] is None else f"{rec['mfu'] * 100:.2f} % of {rec['peak_flops'] / 1e12:g} TFLOP/s"
         f" ({rec['peak_dtype']}, {rec['device_spec']}"
         + (", nominal placeholder peak)" if "placeholder" in (rec.get("peak_source") or "") else ")")),
        ("step time median / p10 / p90 (ms)",
         f"{st.get('median', 0) * 1e3:.2f} / {st.get('p10', 0) * 1e3:.2f} / {st.get('p90', 0) * 1e3:.2f}"),
        ("attention convention", rec["attention_convention"]),
        ("records", records or "(not written)"),
    ]  # fmt: skip
    for k, v in rows:
        t.add_row(k, v)
    console().print(t)


@workload_app.command("sweeps")
def sweeps_cmd(
    name: str | None = typer.Argument(None, help="List the configurations of this sweep."),
    precision: str = typer.Option(
        "bf16", "--precision", help="frontier only: its precision (flopwatch run: bf16, fp32 on a Jetson)."
    ),
    quick: bool = typer.Option(
        False, "--quick", help="frontier only: the shorter grid of flopwatch run --quick."
    ),
    as_json: options.Json = False,
) -> None:
    """List the named sweeps, or the configurations of one. Labels, sizes, counted FLOPs."""
    from flopwatch.pipeline.plan import FRONTIER_SWEEP, frontier_sweep
    from flopwatch.workloads.formulas import closed_form_flops_per_step
    from flopwatch.workloads.sweeps import SWEEP_DESCRIPTIONS, SWEEPS, get_sweep

    if name is None:
        data: Any = [
            {"name": "frontier", "n_configs": len(frontier_sweep(precision)), "description": FRONTIER_SWEEP},
            *(
                {"name": s, "n_configs": len(get_sweep(s)), "description": SWEEP_DESCRIPTIONS[s]}
                for s in SWEEPS
            ),
        ]
    else:
        # frontier: flopwatch run's default sweep on data-center GPUs (built per precision, not a fixed list)
        cfgs = (
            frontier_sweep(precision, quick=quick) if name.strip().lower() == "frontier" else get_sweep(name)
        )
        data = [
            {**c.to_dict(), "flops_per_step": closed_form_flops_per_step(c), "total_flops":
             closed_form_flops_per_step(c) * c.steps}
            for c in cfgs
        ]  # fmt: skip
    if as_json:
        echo_json(data, indent=None)
        return
    from rich.table import Table

    if name is None:
        t = Table(title="workload sweeps")
        for col in ("name", "configurations", "description"):
            t.add_column(col)
        for row in data:
            t.add_row(row["name"], str(row["n_configs"]), row["description"])
    else:
        t = Table(title=f"sweep {name} (FLOPs: fused attention)")
        for col in ("label", "arch", "precision", "steps", "FLOPs per step", "total TFLOP"):
            t.add_column(col)
        for row in data:
            t.add_row(row["label"], row["arch"], row["precision"], str(row["steps"]),
                      f"{row['flops_per_step']:.4e}", f"{row['total_flops'] / 1e12:.4f}")  # fmt: skip
    console().print(t)


def register(app: typer.Typer) -> None:
    """Add ``flopwatch workload ...`` to ``app``."""
    app.add_typer(workload_app, name="workload")
