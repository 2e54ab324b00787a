"""``flopwatch join``: the study step by step — a trace and its workload records joined by time, then calibrated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.records import load_records

# Eight GPU-bound bf16 GPT configs of different sizes and lengths on the simulated A100, with idle gaps.
_SIZES = [(512, 8, 300), (768, 12, 150), (1024, 8, 120), (768, 6, 400), (1280, 8, 90), (512, 12, 250),
          (1024, 12, 80), (1536, 8, 60)]  # fmt: skip


def _schedule(path: Path) -> Path:
    items: list[dict] = [{"idle_s": 30}]
    for d, layers, steps in _SIZES:
        items.append(
            {
                "config": {"arch": "gpt", "d_model": d, "num_layers": layers, "batch_size": 16, "seq_len": 1024,
                           "precision": "bf16"},
                "steps": steps,
            }
        )  # fmt: skip
        items.append({"idle_s": 10})
    path.write_text(json.dumps(items))
    return path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("study")
    trace, records = d / "trace.parquet", d / "runs.jsonl"
    code = main(["sim", "trace", "a100", "--schedule", str(_schedule(d / "s.json")), "-o", str(trace),
                 "--records", str(records)])  # fmt: skip
    assert code == 0
    return trace, records


def test_join_then_calibrate_and_estimate(recorded, tmp_path, capsys) -> None:
    trace, records = recorded
    out = tmp_path / "joined.jsonl"
    assert main(["join", str(trace), str(records), "-o", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["n_records"] == len(_SIZES) == res["n_joined"] and res["mismatches"] == []
    assert res["clock"] == "monotonic" and res["simulated"] is True
    rs = load_records(out, require=("net_energy_j", "duration_s", "total_flops"))
    assert all(r.join["status"] == "ok" and r.simulated and r.net_energy_j > 0 for r in rs)
    assert records.read_text().count("\n") == len(_SIZES)  # the input is untouched
    prof = tmp_path / "p.json"
    assert main(["calibrate", str(out), "-o", str(prof), "--precision", "bf16", "--model", "eq2"]) == 0
    capsys.readouterr()
    assert main(["estimate", "--profile", str(prof), str(out), "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["summary"]["n"] == len(_SIZES) and est["summary"]["mae_pct"] < 15


def test_join_is_the_run_pipelines_join(recorded, tmp_path) -> None:
    """The file-level join and the in-memory stage give the same records."""
    from flopwatch.detect import detect_workloads
    from flopwatch.join import join_records
    from flopwatch.telemetry.trace import Trace

    trace, records = recorded
    out = tmp_path / "j.jsonl"
    assert main(["join", str(trace), str(records), "-o", str(out)]) == 0
    tr = Trace.read(trace)
    mem = join_records(list(load_records(records, require=())), detect_workloads(tr), t0_s=tr.t0_monotonic_s)
    disk = load_records(out, require=())
    assert [r.net_energy_j for r in disk] == [r.net_energy_j for r in mem.records]


def test_join_by_wall_clock(recorded, tmp_path, capsys) -> None:
    trace, records = recorded
    out = tmp_path / "w.jsonl"
    assert main(["join", str(trace), str(records), "-o", str(out), "--clock", "wall", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["clock"] == "wall" and res["n_joined"] == len(_SIZES)


def test_join_refuses_to_overwrite(recorded, tmp_path, capsys) -> None:
    trace, records = recorded
    out = tmp_path / "x.jsonl"
    out.write_text("keep me\n")
    assert main(["join", str(trace), str(records), "-o", str(out)]) == 2
    assert "exists" in capsys.readouterr().err and out.read_text() == "keep me\n"
    assert main(["join", str(trace), str(records), "-o", str(records)]) == 2


def test_join_record_without_timestamps_is_one_line(recorded, tmp_path, capsys) -> None:
    trace, _ = recorded
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"label": "x", "total_flops": 1e12}) + "\n")
    assert main(["join", str(trace), str(bad), "-o", str(tmp_path / "o.jsonl"), "--clock", "monotonic"]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl" in err and "'x'" in err and len(err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def recorded_orin(tmp_path_factory) -> tuple[Path, Path]:
    """The simulated Jetson: its EMC sensor reports DRAM traffic (``dram_bytes_per_s``), the A100's NVML does not."""
    d = tmp_path_factory.mktemp("orin")
    items: list[dict] = [{"idle_s": 20}]
    for dm, steps in ((384, 60), (512, 40), (640, 30)):
        items += [{"config": {"arch": "gpt", "d_model": dm, "num_layers": 4, "batch_size": 4, "seq_len": 256,
                              "precision": "fp32"}, "steps": steps}, {"idle_s": 10}]  # fmt: skip
    (d / "s.json").write_text(json.dumps(items))
    trace, records = d / "trace.parquet", d / "runs.jsonl"
    code = main(
        ["sim", "trace", "orin", "--schedule", str(d / "s.json"), "-o", str(trace), "--records", str(records)]
    )
    assert code == 0
    return trace, records


@pytest.mark.parametrize("clock", ["monotonic", "wall"])
@pytest.mark.parametrize("which", ["recorded", "recorded_orin"])
def test_streamed_join_equals_the_in_memory_join(request, tmp_path, clock, which) -> None:
    """``join`` streams the trace file (detection, energy and the clock origin in passes over row groups); its
    records are those of the in-memory form (whole :class:`Trace` loaded, origin from its frame), field by field:
    energy, coverage, utilisation and DRAM traffic."""
    from flopwatch.detect import detect_workloads
    from flopwatch.join import join_records
    from flopwatch.telemetry.trace import Trace

    trace, records = request.getfixturevalue(which)
    out = tmp_path / "s.jsonl"
    assert main(["join", str(trace), str(records), "-o", str(out), "--clock", clock]) == 0
    tr = Trace.read(trace)
    df = tr.df
    t0 = (
        tr.t0_monotonic_s
        if clock == "monotonic"
        else df["wall_time"].iloc[0].timestamp() - float(df["t_s"].iloc[0])
    )
    mem = join_records(list(load_records(records, require=())), detect_workloads(tr), t0_s=t0, clock=clock)
    disk = load_records(out, require=())
    fields = ("duration_s", "energy_j", "net_energy_j", "coverage", "mean_util", "tb_moved", "idle_power_w")
    assert len(disk) == len(mem.records) >= 3
    ok = [r for r in disk if r.join["status"] == "ok"]
    assert len(ok) >= 3 and all(r.coverage > 0.99 and r.mean_util for r in ok)
    if which == "recorded_orin":
        assert all(r.tb_moved and r.tb_moved > 0 for r in ok)
    for d, m in zip(disk, mem.records, strict=True):
        assert d.label == m.label and d.join == m.join
        for f in fields:
            assert getattr(d, f) == getattr(m, f), (d.label, f)
