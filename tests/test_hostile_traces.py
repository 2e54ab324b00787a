"""Hostile traces: every reader refuses them with one line naming file, row and field (exit 2), never a
traceback, a hang, or a silently wrong energy (issue 11, item 1 for traces)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from flopwatch.cli import main
from flopwatch.detect import detect_workloads
from flopwatch.errors import InputError
from flopwatch.telemetry.integrate import Window, integrate_windows
from flopwatch.telemetry.sensors.replay import open_replay
from flopwatch.telemetry.trace import Trace
from streaming_helpers import synth_frame

HOSTILE = Path(__file__).parent / "hostile" / "traces"
JSON_CASES = {
    "clock_back.json": ("power_mw", "backwards"),
    "negative_power.json": ("power_w", "negative power"),
    "util_over_100.json": ("util", "outside 0–1"),
    "int_too_large.json": ("power_mw", "finite numbers"),
    "nan_value.json": ("power_mw", "finite numbers"),
    "infinity.json": ("power_mw", "finite numbers"),
    "not_an_object.json": (None, "expected a JSON object"),
    "truncated.json": (None, "invalid JSON"),
    "power_above_any_device.json": ("power_w", "implausible"),
}


def _readers(path: Path):
    yield lambda: Trace.read(path)
    yield lambda: detect_workloads(path)
    yield lambda: integrate_windows(path, [Window(0.0, 1.0)])
    yield lambda: open_replay(path, speed=float("inf"))


def _cli_refuses(path: Path, capsys: pytest.CaptureFixture[str], *words: str) -> str:
    assert main(["detect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(path) in err, err
    for w in words:
        assert w in err, err
    return err


@pytest.mark.parametrize("name", sorted(JSON_CASES))
def test_committed_hostile_json_traces_are_refused(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = HOSTILE / name
    field, why = JSON_CASES[name]
    for read in _readers(path):
        with pytest.raises(InputError, match=why) as ei:
            read()
        if field is not None:
            assert ei.value.field == field
    _cli_refuses(path, capsys, why, *([f"field {field!r}"] if field else []))


def _write(tmp_path: Path, name: str, mutate, metadata=None) -> Path:
    df = synth_frame(n_s=120, hz=10, seed=11, holes=False)
    mutate(df)
    md = {"simulated": True, "kind": "synthetic"} | (metadata or {})
    return Trace(df, md).write(tmp_path / name)  # Trace() sorts by time, as a recording's rows are


def _set(col: str, row: int, value: float):
    def m(df):
        df.loc[row, col] = value

    return m


PARQUET_CASES = {
    "negative power": (_set("power_w", 500, -5.0), "power_w", "negative power"),
    "util in percent": (_set("util", 500, 87.0), "util", "a percentage"),
    "mem util negative": (_set("mem_util", 500, -0.5), "mem_util", "outside 0–1"),
    "infinite power": (_set("power_w", 500, np.inf), "power_w", "not finite"),
    "infinite counter": (_set("energy_j", 500, -np.inf), "energy_j", "not finite"),
    "negative DRAM": (_set("dram_bytes_per_s", 500, -1.0), "dram_bytes_per_s", "negative DRAM"),
    "far above any TDP": (_set("power_w", 500, 6000.0), "power_w", "implausible"),
    "negative counter": (_set("energy_j", 500, -3.0), "energy_j", "negative energy counter"),
}


@pytest.mark.parametrize("case", sorted(PARQUET_CASES))
def test_implausible_parquet_rows_are_refused_with_their_row(tmp_path, case, capsys) -> None:
    mutate, field, why = PARQUET_CASES[case]
    path = _write(tmp_path, "t.parquet", mutate)
    for read in _readers(path):
        with pytest.raises(InputError, match=why) as ei:
            read()
        assert ei.value.field == field and ei.value.record == "row 500"
    _cli_refuses(path, capsys, "row 500", f"field {field!r}")


def test_power_above_the_devices_tdp(tmp_path, capsys) -> None:
    """Known spec (A100, 400 W TDP): 900 W is refused; the same trace of an unknown device is accepted."""
    md = {"devices": [{"device_id": "gpu0", "spec_key": "a100"}]}
    path = _write(tmp_path, "a100.parquet", _set("power_w", 77, 900.0), md)
    with pytest.raises(InputError, match="A100.*TDP") as ei:
        detect_workloads(path)
    assert ei.value.record == "row 77"
    dram = _write(tmp_path, "dram.parquet", _set("dram_bytes_per_s", 78, 9e12), md)  # A100: 2.04 TB/s
    with pytest.raises(InputError, match="peak bandwidth") as ei:
        detect_workloads(dram)
    assert ei.value.record == "row 78" and ei.value.field == "dram_bytes_per_s"
    cpu = {"devices": [{"device_id": "gpu0", "spec_key": "cpu"}]}  # RAPL: a placeholder spec, generic limits
    assert (
        detect_workloads(_write(tmp_path, "rapl.parquet", _set("power_w", 77, 300.0), cpu)).idle_power_w > 0
    )
    ok = _write(tmp_path, "unknown.parquet", _set("power_w", 77, 900.0))
    assert detect_workloads(ok).idle_power_w > 0  # read: no spec, no TDP to compare with


def test_clock_jumping_back_is_refused_not_halving_energy(tmp_path, capsys) -> None:
    df = synth_frame(n_s=900, hz=10, seed=12, holes=False)
    df.loc[df.index >= 6000, "t_s"] -= 300.0  # the sensor clock jumps back 300 s at row 6000
    path = tmp_path / "jump.parquet"
    tr = Trace(df, {"kind": "synthetic"})
    tr.df = df  # keep file order: the writer appends rows as they come
    tr.write(path)
    with pytest.raises(InputError, match="backwards") as ei:
        detect_workloads(path)
    assert ei.value.record == "row 6000" and ei.value.field == "t_s"
    _cli_refuses(path, capsys, "row 6000", "backwards")


def test_conflicting_duplicates_refused_identical_ones_dropped(tmp_path, capsys) -> None:
    df = synth_frame(n_s=120, hz=10, seed=13, holes=False)
    dup = df.iloc[[300]].copy()
    both = (
        __import__("pandas").concat([df.iloc[:301], dup, df.iloc[301:]]).reset_index(drop=True)
    )  # row 301 repeats row 300 exactly: a sink called twice
    t = Trace(both, {"kind": "synthetic"})
    p_same = t.write(tmp_path / "same.parquet")
    tr = Trace.read(p_same)
    assert len(tr) == len(df) and tr.metadata["duplicate_samples_dropped"] == 1
    assert (
        detect_workloads(p_same).to_dict()["workloads"] == detect_workloads(Trace(df)).to_dict()["workloads"]
    )
    both.loc[301, "power_w"] += 100.0  # same time, other value: which one is true?
    p_conf = Trace(both, {"kind": "synthetic"}).write(tmp_path / "conflict.parquet")
    with pytest.raises(InputError, match="different values") as ei:
        detect_workloads(p_conf)
    assert ei.value.record == "row 301"
    _cli_refuses(p_conf, capsys, "row 301")


def test_special_files_are_refused_before_opening(tmp_path, capsys) -> None:
    d = tmp_path / "adir.parquet"
    d.mkdir()
    fifo = tmp_path / "fifo.parquet"
    os.mkfifo(fifo)  # opening it would block forever
    cases = [(d, "directory"), (fifo, "FIFO"), (tmp_path / "missing.parquet", "no such file")]
    if Path("/dev/zero").exists():
        cases.append((Path("/dev/zero"), "character device"))
    for path, why in cases:
        for read in _readers(path):
            with pytest.raises(InputError, match=why):
                read()
        _cli_refuses(path, capsys, why)


def test_huge_files_that_are_not_traces(tmp_path, capsys) -> None:
    big = tmp_path / "huge.parquet"
    with open(big, "wb") as f:  # 4 GiB of zeros, sparse: no disk used
        f.truncate(4 << 30)
    with pytest.raises(InputError, match="not a readable Parquet"):
        detect_workloads(big)
    _cli_refuses(big, capsys, "Parquet")
    bigjson = tmp_path / "huge.json"
    with open(bigjson, "wb") as f:
        f.write(b"{")
        f.truncate(300 << 20)
    with pytest.raises(InputError, match="larger than"):
        Trace.read(bigjson)


def test_deeply_nested_json(tmp_path, capsys) -> None:
    p = tmp_path / "nested.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    limit = sys.getrecursionlimit()
    for read in _readers(p):
        with pytest.raises(InputError, match="nested more than|expected a JSON object"):
            read()
    assert sys.getrecursionlimit() == limit
    _cli_refuses(p, capsys)


def test_wrong_column_types(tmp_path, capsys) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 50
    table = pa.table(
        {
            "t_s": np.arange(n, dtype=float),
            "device": ["g"] * n,
            "power_w": ["lots"] * n,
            "util": np.full(n, 0.5),
        }
    )
    p = tmp_path / "strings.parquet"
    pq.write_table(table, p)
    with pytest.raises(InputError, match="not numeric") as ei:
        detect_workloads(p)
    assert ei.value.field == "power_w"
    nan_t = pa.table({"t_s": [0.0, None, 2.0], "device": ["g"] * 3, "power_w": [1.0] * 3, "util": [0.5] * 3})
    p2 = tmp_path / "nan_t.parquet"
    pq.write_table(nan_t, p2)
    with pytest.raises(InputError, match="time is missing") as ei:
        Trace.read(p2)
    assert ei.value.record == "row 1"
    _cli_refuses(p2, capsys, "row 1", "t_s")


def test_tegrastats_logs_special_files_refused(tmp_path) -> None:
    from flopwatch.telemetry.sensors.tegrastats import read_log

    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    for path, why in ((fifo, "FIFO"), (tmp_path, "directory"), (Path("/dev/zero"), "character device")):
        if path.exists():
            with pytest.raises(InputError, match=why):
                read_log(path)
