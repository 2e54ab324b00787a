"""Choose workload configurations from command-line style options: a sweep label, or sizes, or a grid."""

from __future__ import annotations

from dataclasses import replace

from flopwatch.errors import ConfigError
from flopwatch.workloads.config import WorkloadConfig, make_config
from flopwatch.workloads.sweeps import get_config, get_sweep


def select_config(
    *,
    arch: str = "seed-encoder",
    d_model: int | None = None,
    nhead: int | None = None,
    num_layers: int | None = None,
    dim_feedforward: int | None = None,
    batch_size: int | None = None,
    seq_len: int | None = None,
    steps: int | None = None,
    optimizer: str | None = None,
    precision: str | None = None,
    vocab_size: int | None = None,
    sweep: str | None = None,
    label: str | None = None,
) -> WorkloadConfig:
    """The workload config named by ``sweep``/``label``, or built from sizes (ConfigError on a bad
    combination). ``arch`` left at its default says nothing when a sweep label names the config."""
    sizes = {
        "d_model": d_model,
        "nhead": nhead,
        "num_layers": num_layers,
        "dim_feedforward": dim_feedforward,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "optimizer": optimizer,
        "precision": precision,
        "vocab_size": vocab_size,
    }
    if sweep is not None or label is not None:
        if sweep is None or label is None:
            raise ConfigError("--sweep and --label go together", field="sweep" if sweep is None else "label")
        given = [k for k, v in sizes.items() if v is not None]
        if given:
            raise ConfigError(
                f"--sweep/--label name a full configuration; do not combine with --{given[0].replace('_', '-')}",
                field=given[0],
            )
        cfg = get_config(sweep, label)
        if arch not in ("seed-encoder", cfg.arch):  # --arch left at its default says nothing
            raise ConfigError(
                f"--arch {arch} contradicts {sweep}/{label}, which is a {cfg.arch} configuration",
                field="arch",
            )
        return replace(cfg, steps=steps) if steps is not None else cfg
    if arch != "gpt" and vocab_size is not None:
        raise ConfigError("--vocab-size applies to --arch gpt only", field="vocab_size")
    return make_config(arch, steps=steps, **sizes)


def grid_configs(
    sweep: str | None, arch: str, d_model: int | None, seq_len: int | None, num_layers: int | None,
    nhead: int | None, batches: str, dtypes: str, label: list[str] | None,
) -> list[WorkloadConfig]:  # fmt: skip
    """The configs of a ``flopwatch bench`` grid: a named sweep (optionally only some labels), or every
    (dtype, batch) of one model size given as comma-separated lists."""
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
