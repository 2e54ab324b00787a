"""The MASCOTS measurement protocol (`flopwatch bench`): pure logic, simulated device, CPU + replay sensor."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from flopwatch.backends import open_sensors
from flopwatch.cli import main
from flopwatch.errors import ConfigError, InputError
from flopwatch.powermodel.bench import (
    BenchSettings,
    ReadingCollector,
    Window,
    WindowTelemetry,
    aggregate_row,
    bench_grid,
    ci_rel_halfwidth,
    run_protocol,
    stop_decision,
    write_aggregate_csv,
)
from flopwatch.powermodel.datasets import read_aggregate_csv
from flopwatch.powermodel.fit import fit_power_model
from flopwatch.sim.bench import bench_grid_sim
from flopwatch.telemetry.schema import Gap, Reading


def test_ci_rel_halfwidth_matches_scipy(rng: np.random.Generator) -> None:
    x = rng.normal(50, 3, 40)
    lo, hi = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert ci_rel_halfwidth(x) == pytest.approx((hi - lo) / 2 / x.mean())
    assert ci_rel_halfwidth([5.0, 5.0, 5.0]) == 0.0
    assert math.isinf(ci_rel_halfwidth([1.0]))
    assert math.isnan(ci_rel_halfwidth([math.nan, math.nan]))


def _w(mfu: float, util: float) -> Window:
    return Window(0, 1, 1, 1.0, mfu, 1.0, WindowTelemetry(power_w=100.0, util_pct=util))


def test_stop_rule() -> None:
    s = BenchSettings(min_samples=5, max_samples=8)
    stable = [_w(10.0, 90.0)] * 4
    assert stop_decision(stable, s)[0] is False  # below min_samples even when tight
    assert stop_decision([*stable, _w(10.0, 90.0)], s)[:2] == (True, "converged")
    noisy = [_w(m, 90.0) for m in (1, 20, 3, 30, 2, 25, 1)]
    assert stop_decision(noisy, s)[0] is False
    assert stop_decision([*noisy, _w(40, 90)], s)[:2] == (True, "max_samples reached")
    no_util = [_w(10.0, math.nan)] * 5
    ok, why, _, _ = stop_decision(no_util, s)
    assert ok and "MFU only" in why
    noisy_util = [_w(10.0, u) for u in (10, 90, 20, 80, 5)]
    assert stop_decision(noisy_util, s)[0] is False  # both criteria must hold


def test_settings_validation() -> None:
    with pytest.raises(ConfigError):
        BenchSettings(min_samples=10, max_samples=5)
    with pytest.raises(ConfigError):
        BenchSettings(window_s=0)
    with pytest.raises(ConfigError):
        BenchSettings(rel_ci=1.5)


def test_run_protocol_windows_and_mfu(rng: np.random.Generator) -> None:
    calls = {"n": 0}
    durations = rng.uniform(0.09, 0.11, 10_000)

    def step() -> float:
        calls["n"] += 1
        return float(durations[calls["n"]])

    clock = {"t": 0.0}

    def now() -> float:
        clock["t"] += 0.5
        return clock["t"]

    seen: list[tuple[float, float]] = []

    def tel(t0: float, t1: float) -> WindowTelemetry:
        seen.append((t0, t1))
        return WindowTelemetry(power_w=200.0, util_pct=95.0, n_readings=10)

    s = BenchSettings(window_s=1.0, min_samples=6, max_samples=50, warmup_steps=3)
    m = run_protocol(
        step, now=now, telemetry=tel, flops_per_step=1e12, tokens_per_step=512, peak_flops=100e12, settings=s
    )
    assert len(m.windows) >= 6 and m.stop_reason == "converged"
    steps_timed = sum(w.steps for w in m.windows)
    assert calls["n"] == 3 + steps_timed  # warm-up steps are not in any window
    for w in m.windows:
        assert w.duration_s >= 1.0
        assert w.mfu_pct == pytest.approx(100 * w.steps * 1e12 / w.duration_s / 100e12)
        assert w.tokens_per_s == pytest.approx(w.steps * 512 / w.duration_s)
    assert seen == [(w.t0, w.t1) for w in m.windows]
    with pytest.raises(InputError, match="positive duration"):
        run_protocol(
            lambda: 0.0, now=now, telemetry=tel, flops_per_step=1, tokens_per_step=1, peak_flops=1, settings=s
        )


def _reading(t: float, p: float, e: float | None, u: float | None = 0.9) -> Reading:
    return Reading(t_s=t, wall_time=1e9 + t, device="d0", power_w=p, energy_j=e, util=u)


def test_reading_collector_prefers_the_energy_counter() -> None:
    c = ReadingCollector()
    for i in range(11):
        c(_reading(i * 0.1, 100.0 + i, 50.0 * i * 0.1))  # counter says 50 W; instant readings ~105 W
    c(Gap(0.55, 1e9, "d0", "read failed"))
    w = c.window(0.0, 1.0)
    assert w.power_w == pytest.approx(50.0) and w.power_method == "energy counter delta"
    assert w.util_pct == pytest.approx(90.0) and w.n_readings == 11
    assert w.n_gaps == 1 and c.window(0.6, 1.0).n_gaps == 0  # failed reads are counted, not dropped
    c2 = ReadingCollector()
    for i in range(5):
        c2(_reading(i * 0.1, 100.0 + i, None, None))
    w2 = c2.window(0.0, 1.0)
    assert w2.power_w == pytest.approx(102.0) and w2.power_method == "mean of power readings"
    assert math.isnan(w2.util_pct)
    assert c2.window(5, 6).power_method == "none"


def _row(**kw: object) -> dict:
    m = run_protocol(
        lambda: 0.5,
        now=lambda: 0.0,
        telemetry=lambda a, b: WindowTelemetry(power_w=150.0, util_pct=80.0, n_readings=5, power_method="x"),
        flops_per_step=2e12,
        tokens_per_step=256,
        peak_flops=100e12,
        settings=BenchSettings(min_samples=3, max_samples=5),
    )
    args = dict(
        label="cfg", batch_size=8, dtype="bf16", seq_len=32, flops_per_step=2e12, peak_flops=100e12,
        settings=BenchSettings(min_samples=3, max_samples=5), gpu="Test GPU", device="cpu", sensor="none",
        simulated=False,
    )  # fmt: skip
    args.update(kw)
    return aggregate_row(m, **args)


def test_rows_round_trip_through_the_study_reader(tmp_path: Path) -> None:
    out = tmp_path / "bench.csv"
    write_aggregate_csv([_row(), _row(batch_size=16)], out)
    loaded = read_aggregate_csv(out)
    df = loaded.df
    assert list(df["gpu"]) == ["Test GPU", "Test GPU"] and list(df["dtype"]) == ["bf16", "bf16"]
    assert df["mfu_pct"].iloc[0] == pytest.approx(100 * 2e12 / 0.5 / 100e12)
    assert df["flops_per_token"].iloc[0] == pytest.approx(2e12 / (8 * 32))
    assert df["power_w"].iloc[0] == pytest.approx(150.0)
    with pytest.raises(InputError, match="refusing to overwrite"):
        write_aggregate_csv([_row()], out)
    write_aggregate_csv([_row()], out, append=True)
    assert len(read_aggregate_csv(out).df) == 3
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="different header"):
        write_aggregate_csv([_row()], other, append=True)


def test_bench_on_the_simulated_device_is_labelled_and_fits(tmp_path: Path) -> None:
    from flopwatch.workloads.sweeps import get_sweep

    cfgs = get_sweep("quick")[:2]
    s = BenchSettings(min_samples=3, max_samples=6, rate_hz=5)
    rows = bench_grid_sim(cfgs, spec="sim:a100", settings=s, repeats=2, seed=1)
    assert len(rows) == 4
    for r in rows:
        assert r["simulated"] is True and "(simulated)" in r["gpu"]
        assert 3 <= r["samples_per_config"] <= 6
        assert r["power_draw_watts_mean"] > 0 and r["gpu_utilization_mean"] > 0
        assert r["power_method"] == "energy counter delta"
    out = write_aggregate_csv(rows, tmp_path / "sim.csv")
    m = fit_power_model(read_aggregate_csv(out).df, by="gpu")
    assert m.params["n"].iloc[0] == 4
    # Larger model → higher MFU and higher simulated power (the twin's power rises with MFU).
    assert rows[2]["mfu_percentage_hardware_flops_mean"] > rows[0]["mfu_percentage_hardware_flops_mean"]
    # the MFU is named by its convention, never by the study's calflops column; model-FLOPs MFU beside it
    assert all("mfu_percentage_calflops_mean" not in r for r in rows)
    assert all(0 < r["mfu_percentage_mean"] < r["mfu_percentage_hardware_flops_mean"] * 1.5 for r in rows)
    assert rows[2]["power_draw_watts_mean"] > rows[0]["power_draw_watts_mean"]


def test_bench_on_cpu_with_a_replay_sensor(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="the CPU bench trains a model with torch")
    from flopwatch.telemetry.trace import Trace
    from flopwatch.workloads.sweeps import get_sweep

    # A recorded trace (written here, not copied): 60 s at 20 Hz of 40 W and 75 % utilisation.
    readings = [Reading(i / 20, 1.7e9 + i / 20, "gpu0", 40.0, None, 0.75) for i in range(1200)]
    trace = tmp_path / "trace.parquet"
    Trace.from_readings(readings, metadata={"sensor": "test", "simulated": False}).write(trace)
    cfg = get_sweep("quick")[0]
    s = BenchSettings(window_s=0.05, min_samples=3, max_samples=4, cooldown_s=0.0, rate_hz=40, warmup_steps=1)
    rows = bench_grid([cfg], device="cpu", sensor_spec=f"replay:{trace}", settings=s, sleep=lambda _: None)
    (r,) = rows
    assert r["simulated"] is False and r["device"] == "cpu" and r["sensor"].startswith("replay:")
    assert r["power_draw_watts_mean"] == pytest.approx(40.0)
    assert r["gpu_utilization_mean"] == pytest.approx(75.0)
    assert r["n_readings"] > 0 and r["n_gaps"] >= 0 and r["samples_per_config"] in (3, 4)
    assert r["peak_flops"] == 1e12 and "placeholder" in r["peak_table"]  # the CPU's nominal peak, said so
    with pytest.raises(ConfigError, match="virtual time"):
        bench_grid([cfg], device="cpu", sensor_spec="sim:a100", settings=s, open_sensors=open_sensors)


def test_bench_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b.csv"
    args = ["bench", "--device", "sim:l40", "--sweep", "quick", "--label", "d128_b8_s64_L3",
            "--min-samples", "3", "--max-samples", "5", "--rate-hz", "5", "-o", str(out), "--json"]  # fmt: skip
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["rows"]) == 1 and d["rows"][0]["simulated"] is True
    assert len(read_aggregate_csv(out).df) == 1
    assert main(args) == 2  # never overwrites
    assert "refusing to overwrite" in capsys.readouterr().err
    assert main([*args, "--append"]) == 0
    capsys.readouterr()
    assert len(read_aggregate_csv(out).df) == 2
    assert main(["bench", "--sweep", "nope", "-o", str(tmp_path / "x.csv")]) == 2


def test_bench_refuses_a_sensor_spec_that_opens_several_devices(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="bench_grid checks the configs on the CPU with torch first")
    from flopwatch.telemetry.trace import Trace
    from flopwatch.workloads.sweeps import get_sweep

    readings = [Reading(i / 10, 1.7e9 + i / 10, f"gpu{i % 2}", 40.0, None, 0.75) for i in range(40)]
    trace = tmp_path / "two.parquet"
    Trace.from_readings(readings, metadata={"sensor": "test", "simulated": False}).write(trace)
    with pytest.raises(ConfigError, match="opened 2 devices"):
        bench_grid(get_sweep("quick")[:1], device="cpu", sensor_spec=f"replay:{trace}")


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--dtype", "fp32,fp16", "-o", "{tmp}/a.csv"], "fp16"),  # refused before the fp32 config runs
        (["-o", "{tmp}/missing/a.csv"], "directory does not exist"),
        (["-o", "{tmp}"], "is a directory"),
        (["--device", "cuda:x", "-o", "{tmp}/b.csv"], "unknown device"),
    ],
)
def test_bench_cli_refuses_bad_grids_before_measuring(
    tmp_path: Path, extra: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if needle == "fp16":
        pytest.importorskip("torch", reason="whether the CPU runs fp16 is asked of torch")
    base = ["bench", "--device", "cpu", "--d-model", "32", "--seq-len", "8", "--batch", "1"]
    argv = base + [a.replace("{tmp}", str(tmp_path)) for a in extra]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.csv"))  # nothing measured, nothing written
