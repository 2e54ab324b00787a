"""Round 13 (runs, ledgers, windows; docs/threat-model.md): families found by the principle that every number the
other side supplies may only widen a bound or block "below".

`join-relabel`: the runner's record names its device itself; the trace the verifier's sensor recorded names the
model it read. Before this round the join carried the trace's sensor kind and rate into the record but not the
model, so a record naming an A100 joined with an H100's trace was bounded with the A100's datasheet. Every number
here is SIMULATED (`flopwatch sim trace`, seed 0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flopwatch.cli import main
from flopwatch.estimate.verdict import assess_record
from flopwatch.join import trace_context
from flopwatch.records import WorkloadRecord, load_records

A100_IDLE_W = 48.4  # the A100 SXM's datasheet idle (devices.py): what a relabelling operator gives the join
CONFLICT = "the row names more than one device model (a100, h100): judged as the most capable, h100"


@pytest.fixture(scope="module")
def h100_capped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A SIMULATED H100 trace of one bf16 GPT run (d2048, 16 layers, 60 steps) under a 480 W power limit (its mean
    power, 458 W, inside an A100 SXM's envelope of 1.2 × 400 W), and the runner's record of it."""
    d = tmp_path_factory.mktemp("r13")
    cfg = {
        "arch": "gpt",
        "num_layers": 16,
        "batch_size": 8,
        "seq_len": 2048,
        "precision": "bf16",
        "d_model": 2048,
    }
    (d / "s.json").write_text(json.dumps([{"idle_s": 30}, {"config": cfg, "steps": 60}, {"idle_s": 10}]))
    assert main(["sim", "trace", "h100", "--schedule", str(d / "s.json"), "-o", str(d / "t.parquet"),
                 "--records", str(d / "r.jsonl"), "--power-cap-w", "480"]) == 0  # fmt: skip
    return d / "t.parquet", json.loads((d / "r.jsonl").read_text().splitlines()[0])


def _joined(
    trace: Path, rec: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> WorkloadRecord:
    (tmp_path / "r.jsonl").write_text(json.dumps(rec) + "\n")
    out = tmp_path / "j.jsonl"
    assert main(["join", str(trace), str(tmp_path / "r.jsonl"), "-o", str(out), "--idle-power",
                 str(A100_IDLE_W)]) == 0  # fmt: skip
    capsys.readouterr()
    (r,) = load_records(out, require=())
    return r


def test_a_record_naming_another_model_than_its_trace_is_judged_as_the_traces(h100_capped, tmp_path, capsys):
    """`join-relabel`: the runner's record of the capped H100 run names an A100 (`device`, `device_name`); the
    join's idle baseline is the A100's datasheet idle (so the idle check is quiet). Before: bound 0.973 × truth
    (the A100's bf16 peak × time), "below" at 0.99 × truth. After: judged as the H100 the trace read, named."""
    trace, rec = h100_capped
    relabelled = {**rec, "device": "sim:a100", "device_name": "NVIDIA A100-SXM4-80GB"}
    r = _joined(trace, relabelled, tmp_path, capsys)
    truth = float(r.total_flops)
    assert r.raw["sensor_device"] == ["NVIDIA H100 80GB HBM3"]  # what the verifier's sensor read
    a = assess_record(None, r, threshold_flops=0.99 * truth)
    assert a.verdict != "below" and a.upper_flops >= truth, (a.verdict, a.upper_flops / truth)
    assert any(CONFLICT in w for w in a.warnings), a.warnings
    assert (
        assess_record(None, r, threshold_flops=1e25).verdict == "uncertain"
    )  # a conflict never makes "below"


def test_the_honest_join_is_unchanged(h100_capped, tmp_path, capsys):
    """The runner's record naming the H100 it ran on: no conflict, no new warning, "below" just over its bound."""
    trace, rec = h100_capped
    r = _joined(trace, rec, tmp_path, capsys)
    a = assess_record(None, r, threshold_flops=1e25)
    assert a.verdict == "below" and a.warnings == ()
    assert a.upper_flops >= float(r.total_flops)
    assert assess_record(None, r, threshold_flops=1.01 * a.upper_flops).verdict == "below"


def test_the_runners_own_sensor_device_does_not_pass_the_join(h100_capped, tmp_path, capsys):
    """A runner's record that writes ``sensor_device`` itself (the A100, beside its A100 name) did not observe the
    device: the join replaces it with the trace's (records.SENSOR_KEYS), and the conflict stands."""
    trace, rec = h100_capped
    forged = {**rec, "device": "sim:a100", "device_name": "NVIDIA A100-SXM4-80GB", "sensor_device": ["a100"]}
    r = _joined(trace, forged, tmp_path, capsys)
    assert r.raw["sensor_device"] == ["NVIDIA H100 80GB HBM3"]
    assert any(CONFLICT in w for w in assess_record(None, r, threshold_flops=1e25).warnings)


def test_a_multi_device_trace_names_the_joined_devices_model():
    """`--device gpu1` names gpu1's model only; no `--device`: every model the trace lists (a mixed node's records
    are then judged as its most capable model, named)."""
    md = {"devices": [
        {"device_id": "gpu0", "name": "NVIDIA H100 80GB HBM3", "spec_key": "h100", "kind": "nvml"},
        {"device_id": "gpu1", "name": "NVIDIA A100-SXM4-80GB", "spec_key": "a100", "kind": "nvml"},
    ]}  # fmt: skip
    assert trace_context(md, "gpu1")["sensor_device"] == ["a100", "NVIDIA A100-SXM4-80GB"]
    assert trace_context(md)["sensor_device"] == [
        "h100",
        "NVIDIA H100 80GB HBM3",
        "a100",
        "NVIDIA A100-SXM4-80GB",
    ]
    assert "sensor_device" not in trace_context({"kind": "nvml"})  # a trace naming no model adds no claim
