"""Workload configs, sweeps, the training run and its record, and the CLI contract."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.errors import ConfigError
from flopwatch.workloads.config import EncoderConfig, GPTConfig, config_from_dict, make_config
from flopwatch.workloads.sweeps import SWEEPS, get_config, get_sweep

TINY = [
    "--d-model",
    "32",
    "--batch-size",
    "2",
    "--seq-len",
    "8",
    "--num-layers",
    "1",
    "--dim-feedforward",
    "64",
]


# ------------------------------------------------------------------------------------------------ configs
def test_defaults_are_the_studys() -> None:
    c = EncoderConfig(d_model=256, batch_size=16, seq_len=128)
    assert (c.nhead, c.num_layers, c.dim_feedforward, c.optimizer, c.precision, c.dropout) == (
        4, 3, 512, "adamw", "fp32", 0.1,
    )  # fmt: skip
    assert c.name == "d256_b16_s128_L3"
    g = GPTConfig(d_model=256, batch_size=2, seq_len=32)
    assert (g.nhead, g.dim_feedforward) == (4, 1024)  # head size 64, MLP 4·d


def test_gpt_refuses_explicit_zero_sizes_instead_of_defaulting() -> None:
    for name in ("nhead", "dim_feedforward"):
        with pytest.raises(ConfigError) as e:
            make_config("gpt", d_model=128, batch_size=2, seq_len=8, **{name: 0})
        assert e.value.field == name
    g = make_config("gpt", d_model=128, batch_size=2, seq_len=8)
    assert (g.nhead, g.dim_feedforward) == (2, 512)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"d_model": 250, "nhead": 4}, "nhead"),
        ({"d_model": 0}, "d_model"),
        ({"batch_size": -1}, "batch_size"),
        ({"seq_len": 2.5}, "seq_len"),
        ({"steps": 0}, "steps"),
        ({"precision": "fp8"}, "precision"),
        ({"optimizer": "adam"}, "optimizer"),
        ({"dropout": 1.0}, "dropout"),
    ],
)
def test_invalid_configs_are_refused_with_the_field(kw: dict, field: str) -> None:
    base = {"d_model": 64, "batch_size": 2, "seq_len": 8}
    base.update(kw)
    with pytest.raises(ConfigError) as e:
        make_config("seed-encoder", **base)
    assert e.value.field == field
    assert field in str(e.value)


def test_make_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown arch"):
        make_config("rnn", d_model=8, batch_size=1, seq_len=1)
    with pytest.raises(ConfigError, match="vocab_size"):
        make_config("seed-encoder", d_model=8, batch_size=1, seq_len=1, vocab_size=10)
    with pytest.raises(ConfigError, match="seq_len is required"):
        make_config("gpt", d_model=8, batch_size=1)


def test_config_round_trip_and_precision_aliases() -> None:
    g = make_config("gpt", d_model=128, batch_size=2, seq_len=16, precision="bfloat16", vocab_size=100)
    assert g.precision == "bf16"
    again = config_from_dict(g.to_dict())
    assert again.name == g.name and again.to_dict() == g.to_dict()


# ------------------------------------------------------------------------------------------------- sweeps
def test_jetson_sweeps_match_the_published_records(v2_records_path: Path) -> None:
    recs = json.loads(v2_records_path.read_text())["records"]
    fp32 = get_sweep("jetson-fp32")
    prec = get_sweep("jetson-precision")
    assert len(fp32) == 26 and len(prec) == 12
    by_label = {c.name: c for c in fp32 + prec}
    assert sorted(by_label) == sorted(r["label"] for r in recs)
    for r in recs:  # the sweep configs are the records' configs (sizes, steps and options)
        assert by_label[r["label"]] == config_from_dict(r["config"])
    assert all(c.precision == "fp32" for c in fp32)
    assert {c.precision for c in prec} == {"tf32", "fp16", "bf16"}


def test_sweep_lookup() -> None:
    assert set(SWEEPS) >= {"jetson-fp32", "jetson-precision", "datacenter", "quick"}
    assert get_config("jetson-fp32", "d256_b16_s128_L3").steps == 4000
    with pytest.raises(ConfigError, match="unknown sweep"):
        get_sweep("nope")
    with pytest.raises(ConfigError, match="no configuration labelled"):
        get_config("quick", "d999")
    for name in SWEEPS:
        labels = [c.name for c in get_sweep(name)]
        assert len(labels) == len(set(labels)), name


# -------------------------------------------------------------------------------------------------- runs
def test_tiny_workload_runs_end_to_end_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from flopwatch.workloads.ground_truth import count_flops
    from flopwatch.workloads.run import run_workload

    out = tmp_path / "records.jsonl"
    cfg = EncoderConfig(d_model=32, batch_size=2, seq_len=8, num_layers=1, dim_feedforward=64, steps=4)
    before = time.monotonic()
    rec = run_workload(cfg, "cpu", warmup=1, records=out)
    after = time.monotonic()
    assert before <= rec["start_monotonic_s"] < rec["end_monotonic_s"] <= after
    assert rec["start_wall"] < rec["end_wall"]
    assert rec["steps"] == 4 and rec["label"] == cfg.name and rec["device"] == "cpu"
    fc = count_flops(cfg, "math")
    assert rec["attention_convention"] == "math"  # the CPU runs (and counts) the math kernel
    assert rec["flops_per_step"] == fc.flops_per_step
    assert rec["total_flops"] == 4 * fc.flops_per_step
    dur = rec["end_monotonic_s"] - rec["start_monotonic_s"]
    assert rec["achieved_flops_per_s"] == pytest.approx(rec["total_flops"] / dur)
    assert rec["mfu"] == pytest.approx(rec["achieved_flops_per_s"] / rec["peak_flops"])
    st = rec["step_time_s"]
    assert st["n"] == 4 and st["p10"] <= st["median"] <= st["p90"] and st["mean"] > 0
    assert rec["simulated"] is False and rec["schema"] == "flopwatch.record/1"
    assert math.isfinite(rec["final_loss"])
    lines = out.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["total_flops"] == rec["total_flops"]
    # a second run appends; nothing already recorded is lost
    run_workload(make_config("gpt", d_model=32, batch_size=2, seq_len=8, num_layers=1, vocab_size=64, steps=2),
                 "cpu", warmup=0, records=out)  # fmt: skip
    lines2 = out.read_text().splitlines()
    assert len(lines2) == 2 and lines2[0] == lines[0]
    assert json.loads(lines2[1])["arch"] == "gpt"


def test_run_reports_progress_and_both_mfu_conventions() -> None:
    pytest.importorskip("torch")
    from flopwatch.workloads.formulas import model_flops_per_step
    from flopwatch.workloads.run import run_workload

    cfg = make_config("gpt", d_model=32, batch_size=2, seq_len=8, num_layers=1, vocab_size=64, steps=3)
    seen: list[tuple[str, float, float | None]] = []
    rec = run_workload(cfg, "cpu", warmup=2, progress=lambda *a: seen.append(a), mfu_convention="model")
    phases = [p for p, _, _ in seen]
    assert phases[:3] == ["loading torch", "counting FLOPs", "building model"] and "warm-up" in phases
    assert seen[-1] == ("training", 3, 3)  # the last call says the timed steps are done
    assert rec["mfu_convention"] == "model" and rec["mfu"] == rec["mfu_model"]
    assert rec["model_flops_per_step"] == model_flops_per_step(cfg)
    # same run, same peak: the two MFUs differ exactly by the FLOPs per step they count
    assert rec["mfu_hardware"] / rec["mfu_model"] == pytest.approx(
        rec["flops_per_step"] / rec["model_flops_per_step"]
    )
    with pytest.raises(ConfigError, match="MFU convention"):
        run_workload(cfg, "cpu", mfu_convention="marketing")


def test_run_for_seconds() -> None:
    pytest.importorskip("torch")
    from flopwatch.workloads.run import run_workload

    cfg = EncoderConfig(d_model=32, batch_size=2, seq_len=8, num_layers=1, dim_feedforward=64)
    rec = run_workload(cfg, "cpu", seconds=0.3, warmup=0)
    assert rec["steps"] >= 1
    assert rec["end_monotonic_s"] - rec["start_monotonic_s"] >= 0.3


def test_device_and_precision_refused_before_running(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from flopwatch.workloads.config import cpu_has_bf16
    from flopwatch.workloads.run import run_workload

    out = tmp_path / "r.jsonl"
    for p in ("fp16", "tf32"):
        with pytest.raises(ConfigError, match=p):
            run_workload(EncoderConfig(d_model=32, batch_size=2, seq_len=8, precision=p), "cpu", records=out)
    if not cpu_has_bf16():
        with pytest.raises(ConfigError, match="bf16"):
            run_workload(
                EncoderConfig(d_model=32, batch_size=2, seq_len=8, precision="bf16"), "cpu", records=out
            )
    with pytest.raises(ConfigError, match="device"):
        run_workload(EncoderConfig(d_model=32, batch_size=2, seq_len=8), "tpu")
    with pytest.raises(ConfigError, match="steps or seconds"):
        run_workload(EncoderConfig(d_model=32, batch_size=2, seq_len=8), "cpu", steps=2, seconds=1.0)
    with pytest.raises(ConfigError, match="fused"):
        run_workload(EncoderConfig(d_model=32, batch_size=2, seq_len=8), "cpu", attention="fused")
    assert not out.exists()  # nothing ran, nothing written


# --------------------------------------------------------------------------------------------------- CLI
def test_cli_flops_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    assert main(["workload", "flops", "--sweep", "jetson-fp32", "--label", "d256_b16_s128_L3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for k in ("flops_per_step", "matmul_flops_per_step", "attention_flops_per_step", "attention_convention"):
        assert k in out
    assert out["attention_convention"] == "fused"
    assert out["total_flops"] == 4000 * out["flops_per_step"]
    assert main(["workload", "flops", *TINY, "--attention", "math", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["attention_convention"] == "math"
    assert main(["workload", "flops", *TINY]) == 0  # human table
    assert "FLOPs per step" in capsys.readouterr().out  # the table: a human label; --json keeps the key


@pytest.mark.parametrize(
    "argv",
    [
        ["workload", "flops", "--d-model", "30", "--nhead", "4", "--batch-size", "2", "--seq-len", "8"],
        ["workload", "flops", "--d-model", "-3", "--batch-size", "2", "--seq-len", "8"],
        ["workload", "flops", "--sweep", "nope", "--label", "x"],
        ["workload", "flops", "--sweep", "quick", "--label", "nope"],
        ["workload", "flops", "--sweep", "quick"],
        ["workload", "flops", "--sweep", "quick", "--label", "d128_b8_s64_L3", "--d-model", "64"],
        ["workload", "run", *TINY, "--device", "cpu", "--precision", "fp16"],
        ["workload", "run", *TINY, "--device", "cpu", "--steps", "2", "--seconds", "1"],
        ["workload", "flops", *TINY, "--attention", "flash"],
        ["workload", "flops", "--arch", "gpt", "--sweep", "quick", "--label", "d128_b8_s64_L3"],
        ["workload", "flops", "--arch", "gpt", *TINY, "--nhead", "0"],
        ["workload", "run", *TINY, "--device", "cpu", "--warmup", "-1"],
        ["workload", "run", *TINY, "--device", "cpu", "--seconds", "nan"],
    ],
)
def test_cli_invalid_configs_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("flopwatch: error:") and len(err.strip().splitlines()) == 1


def test_cli_run_appends_record(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "runs.jsonl"
    argv = [
        "workload",
        "run",
        *TINY,
        "--device",
        "cpu",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--records",
        str(out),
    ]
    assert main([*argv, "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["steps"] == 2 and rec["config"]["d_model"] == 32
    assert json.loads(out.read_text().splitlines()[0])["label"] == rec["label"]


def test_cli_sweeps(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workload", "sweeps", "--json"]) == 0
    names = {s["name"]: s["n_configs"] for s in json.loads(capsys.readouterr().out)}
    assert names["jetson-fp32"] == 26 and names["jetson-precision"] == 12
    assert main(["workload", "sweeps", "jetson-precision", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 12 and rows[0]["label"] == "d384_b16_s128_L3_tf32"


def test_cli_import_stays_light() -> None:
    import subprocess
    import sys

    code = "import sys, flopwatch.cli; print('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
    )


# ------------------------------------------------------------------------------ GPU-only paths, on the CPU
def test_timed_loop_never_enters_a_flop_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from torch.utils import flop_counter

    from flopwatch.workloads.ground_truth import count_flops
    from flopwatch.workloads.run import run_workload

    cfg = EncoderConfig(d_model=32, batch_size=2, seq_len=8, num_layers=1, dim_feedforward=64, steps=2)
    count_flops(cfg, "math")  # cached: the run must not count again, and never inside its loop

    def refuse(self: object) -> None:
        raise AssertionError("FlopCounterMode entered during the run")

    monkeypatch.setattr(flop_counter.FlopCounterMode, "__enter__", refuse)
    rec = run_workload(cfg, "cpu", warmup=1)
    assert rec["total_flops"] == 2 * count_flops(cfg, "math").flops_per_step


def test_tf32_switch_uses_the_api_in_force_and_restores_it() -> None:
    torch = pytest.importorskip("torch")
    from flopwatch.workloads.run import matmul_precision

    mm = torch.backends.cuda.matmul
    if not hasattr(mm, "fp32_precision"):
        pytest.skip("torch < 2.9: legacy allow_tf32 only")
    before = mm.fp32_precision
    try:
        # A process that already used the new API (torch raises if allow_tf32 is read after that).
        mm.fp32_precision = "tf32"
        with matmul_precision("cuda:0", "fp32"):
            assert mm.fp32_precision == "ieee"  # fp32 = full FP32, measured against the FP32-vector peak
        assert mm.fp32_precision == "tf32"
        mm.fp32_precision = "ieee"
        with matmul_precision("cuda", "tf32"):
            assert mm.fp32_precision == "tf32"
        assert mm.fp32_precision == "ieee"
        with matmul_precision("cpu", "tf32"):  # nothing to switch on the CPU
            assert mm.fp32_precision == "ieee"
    finally:
        mm.fp32_precision = before


def test_missing_fused_kernel_and_oom_are_config_errors() -> None:
    pytest.importorskip("torch")
    from flopwatch.workloads.run import sdpa_backends, step_error

    cfg = EncoderConfig(d_model=36, nhead=4, batch_size=2, seq_len=8)
    err = step_error(RuntimeError("No available kernel. Aborting execution."), cfg, "fused")
    assert isinstance(err, ConfigError) and err.field == "attention" and "head size 9" in str(err)
    oom = step_error(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), cfg, "fused")
    assert isinstance(oom, ConfigError) and oom.field == "batch_size"
    assert step_error(RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED"), cfg, "fused") is None
    assert len(sdpa_backends("cuda:0", "fused")) == 3 and len(sdpa_backends("cpu", "math")) == 1


def test_record_names_the_cpu_and_where_its_peak_comes_from() -> None:
    pytest.importorskip("torch")
    from flopwatch.workloads.run import _cpu_name, run_workload

    cfg = EncoderConfig(d_model=32, batch_size=2, seq_len=8, num_layers=1, dim_feedforward=64, steps=1)
    rec = run_workload(cfg, "cpu", warmup=0)
    assert rec["device_name"] == _cpu_name() and rec["device_spec"] == "cpu"
    assert "placeholder" in rec["peak_source"]  # a CPU MFU is against a nominal peak, and says so


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--device", "cuda:x"], "unknown device"),
        (["--device", "cuda:"], "unknown device"),
        (["--records", "."], "is a directory"),
    ],
)
def test_cli_run_refuses_bad_device_and_records_before_running(
    extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    assert main(["workload", "run", *TINY, "--steps", "1", *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_a_record_that_cannot_be_written_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    from flopwatch.errors import InputError
    from flopwatch.workloads import run

    def disk_full(path: object, record: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run, "append_jsonl", disk_full)
    cfg = EncoderConfig(d_model=32, batch_size=2, seq_len=8, num_layers=1, dim_feedforward=64, steps=1)
    with pytest.raises(InputError, match="No space left"):
        run.run_workload(cfg, "cpu", warmup=0, records=tmp_path / "r.jsonl")
    kept = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert kept["label"] == cfg.name and kept["steps"] == 1
