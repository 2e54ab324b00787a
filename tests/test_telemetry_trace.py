"""Trace format, energy integration, Parquet/journal I/O and the seed timeseries reader."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flopwatch.errors import InputError
from flopwatch.telemetry.schema import Gap, Reading, base_metadata
from flopwatch.telemetry.trace import Trace
from flopwatch.telemetry.writer import TraceWriter


def _readings(n=101, dt=0.1, power=10.0, counter=True, dev="gpu0"):
    out = []
    for i in range(n):
        t = 100.0 + i * dt
        out.append(
            Reading(
                t_s=t,
                wall_time=1.7e9 + i * dt,
                device=dev,
                power_w=power,
                energy_j=(500.0 + power * i * dt) if counter else None,
                util=0.5,
                extra={"power_limit_w": 300.0},
            )
        )
    return out


def test_from_readings_relative_time_and_schema():
    tr = Trace.from_readings(_readings(), metadata=base_metadata(kind="test", rate_hz=10))
    assert tr.df["t_s"].iloc[0] == 0.0
    assert tr.t0_monotonic_s == pytest.approx(100.0)
    assert list(tr.df.columns[:11]) == [
        "t_s", "wall_time", "device", "power_w", "energy_j", "util", "mem_util",
        "dram_bytes_per_s", "sm_clock_mhz", "temp_c", "gap_error",
    ]  # fmt: skip
    assert "extra_power_limit_w" in tr.df.columns
    assert str(tr.df["wall_time"].dt.tz) == "UTC"


@pytest.mark.parametrize("counter", [True, False])
def test_energy_counter_and_trapezoid_agree_on_constant_power(counter):
    tr = Trace.from_readings(_readings(counter=counter))
    e = tr.energy(1.0, 6.0, idle_power_w=2.0)
    assert e.method == ("counter" if counter else "trapezoid")
    assert e.energy_j == pytest.approx(50.0)
    assert e.net_energy_j == pytest.approx(40.0)
    assert e.coverage == pytest.approx(1.0)


def test_energy_counter_reset_falls_back_to_power():
    rs = _readings()
    # a driver reload at i=50 resets the counter to ~0: that interval's energy comes from power instead
    rs = [
        r if i < 50 else Reading(**{**r.__dict__, "energy_j": r.energy_j - 540.0}) for i, r in enumerate(rs)
    ]
    tr = Trace.from_readings(rs)
    e = tr.energy(0.0, 10.0)
    assert e.method == "counter"
    assert e.energy_j == pytest.approx(100.0)


def test_energy_coverage_counts_gaps():
    rs = [r for i, r in enumerate(_readings(counter=False)) if not 40 <= i < 60]
    gaps = [Gap(100.0 + i * 0.1, 1.7e9, "gpu0", "SensorError: boom") for i in range(40, 60)]
    tr = Trace.from_readings(rs + gaps)
    e = tr.energy(0.0, 10.0)
    assert e.coverage == pytest.approx(0.79, abs=0.011)  # the 2.1 s hole is bridged but not covered
    assert e.energy_j == pytest.approx(100.0)  # constant power: bridging is exact here
    assert len(tr.gaps) == 20


def test_idle_power_is_median_and_errors_without_power():
    tr = Trace.from_readings(_readings())
    assert tr.idle_power_w() == 10.0
    with pytest.raises(InputError, match="power_w"):
        tr.idle_power_w(t0=1e6)


def test_energy_rejects_reversed_interval():
    with pytest.raises(InputError):
        Trace.from_readings(_readings()).energy(5.0, 1.0)


def test_writer_roundtrip_row_groups_and_late_extras(tmp_path):
    p = tmp_path / "t.parquet"
    md = base_metadata(kind="test", rate_hz=10, fingerprint={"model": "X"})
    rs = _readings()
    with TraceWriter(p, md, flush_every_s=1e9, row_group_rows=30) as w:
        for r in rs[:50]:
            w.write(r)
        w.write_gap(105.0, 1.7e9 + 5, "gpu0", "SensorError: nope")
        for r in rs[50:]:
            w.write(Reading(**{**r.__dict__, "extra": {"power_limit_w": 250.0, "late_w": 1.5}}))
    assert not (tmp_path / "t.parquet.journal").exists()
    import pyarrow.parquet as pq

    assert pq.ParquetFile(p).num_row_groups >= 3
    tr = Trace.read(p)
    assert len(tr) == 102 and len(tr.gaps) == 1
    assert tr.metadata["fingerprint"] == {"model": "X"}
    assert tr.metadata["t0_monotonic_s"] == pytest.approx(100.0)
    assert tr.df["extra_late_w"].notna().sum() == 51  # extras first seen after the schema was fixed survive
    assert tr.energy(0, 10).energy_j == pytest.approx(100.0)


def test_writer_refuses_overwrite(tmp_path):
    p = tmp_path / "t.parquet"
    p.write_bytes(b"precious")
    with pytest.raises(InputError, match="exists"):
        TraceWriter(p, {})
    assert p.read_bytes() == b"precious"


def test_crash_recovery_from_journal(tmp_path):
    """A writer that never closes (crash) leaves a footer-less Parquet; the journal recovers all flushed rows."""
    p = tmp_path / "crash.parquet"
    w = TraceWriter(p, base_metadata(kind="test"), flush_every_s=1e9, row_group_rows=25)
    for r in _readings():
        w.write(r)  # 100 rows flushed in 4 row groups, 1 row still buffered when we "crash"
    w._pool.shutdown(wait=True)  # let the background flushes land, then "crash" (no close, no footer)
    tr = Trace.read(p)
    assert tr.metadata["recovered_from_journal"] is True
    assert len(tr) == 100


def test_truncated_parquet_is_input_error(tmp_path):
    p = tmp_path / "t.parquet"
    Trace.from_readings(_readings()).write(p)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="t.parquet"):
        Trace.read(p)
    with pytest.raises(InputError, match="no such file"):
        Trace.read(tmp_path / "missing.parquet")


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"gpu_pct": []}, "power_mw"),
        ({"power_mw": "x"}, "power_mw"),
        ({"power_mw": [[0, 1], [1, "a"]]}, "power_mw"),
        ({"power_mw": [[0, 1], [1, 2]], "gpu_pct": [[0, 1], [1]]}, "gpu_pct"),
        ({"power_mw": [[1, 1], [0, 2]]}, "power_mw"),
        ({"power_mw": [[0, 1], [1, 2]], "t_start": "soon"}, "t_start"),
    ],
)
def test_malformed_timeseries_names_field(tmp_path, payload, field):
    p = tmp_path / "ts.json"
    p.write_text(json.dumps(payload))
    with pytest.raises(InputError) as ei:
        Trace.read(p)
    assert ei.value.field == field and "ts.json" in str(ei.value)


def test_not_json(tmp_path):
    p = tmp_path / "ts.json"
    p.write_text("{nope")
    with pytest.raises(InputError, match="invalid JSON"):
        Trace.read(p)


def test_seed_timeseries_alignment(timeseries_path):
    tr = Trace.read(timeseries_path)
    assert len(tr) == 1296
    al = tr.metadata["alignment"]
    assert al["gpu_pct"]["matched_rows"] == 1284 and al["dram_bytes_s"]["matched_rows"] == 1294
    assert tr.df["util"].max() <= 1.0
    assert tr.metadata["t_start"] == pytest.approx(65.4738, abs=1e-3)
    assert not tr.simulated


def test_seed_roundtrip_parquet(timeseries_path, tmp_path):
    tr = Trace.read(timeseries_path)
    p = tr.write(tmp_path / "seed.parquet")
    back = Trace.read(p)
    assert back.metadata["t_start"] == tr.metadata["t_start"]
    np.testing.assert_allclose(back.df["power_w"], tr.df["power_w"])
    assert back.energy(65, 590).energy_j == pytest.approx(tr.energy(65, 590).energy_j)


def test_foreign_parquet_names_missing_or_bad_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "other.parquet"
    pq.write_table(pa.table({"time": [0.0, 1.0], "watts": [1.0, 2.0]}), p)
    with pytest.raises(InputError) as ei:
        Trace.read(p)
    assert ei.value.field == "t_s" and "other.parquet" in str(ei.value)
    pq.write_table(pa.table({"t_s": [0.0, 1.0], "device": ["a", "a"], "power_w": ["hot", "cold"]}), p)
    with pytest.raises(InputError) as ei:
        Trace.read(p)
    assert ei.value.field == "power_w"


def test_energy_window_beyond_data_has_partial_coverage():
    tr = Trace.from_readings(_readings(counter=True))  # 0–10 s
    e = tr.energy(5.0, 15.0)
    assert e.energy_j == pytest.approx(50.0) and e.coverage == pytest.approx(0.5)


def test_writer_refuses_to_clobber_a_crash_journal(tmp_path):
    p = tmp_path / "t.parquet"
    (tmp_path / "t.parquet.journal").write_bytes(b"unrecovered")
    with pytest.raises(InputError, match="journal"):
        TraceWriter(p, {})


def test_a_replayed_seed_trace_is_dated_from_the_replay_never_the_file_or_the_future(timeseries_path):
    """The seed's ``timeseries.json`` has no wall clock: its rows carry none (not the file's mtime), and a replay
    dates its readings from the real clock so that the trace ends when the replay began (issue 24, newcomer
    defect 11; at ``--speed 50`` the rows had run ahead of the real clock)."""
    import time

    from flopwatch.telemetry.sensors.replay import open_replay

    tr = Trace.read(timeseries_path)
    assert tr.df["wall_time"].isna().all() and tr.metadata["wall_time_synthetic"] is True
    t0 = time.time()
    (sensor,) = open_replay(timeseries_path, speed=float("inf"))
    r = sensor.read()
    length = float(tr.df["t_s"].max() - tr.df["t_s"].min())
    assert t0 - length - 5 <= r.wall_time <= time.time() - length + 5  # the first row: a trace's length ago
