"""Records: the seed format and our JSON Lines, unit conversions, validation, append-only writes."""

from __future__ import annotations

import json
import math
import os

import pytest

from flopwatch.errors import InputError
from flopwatch.records import (
    RECORD_SCHEMA,
    RecordSet,
    WorkloadRecord,
    append_record,
    as_record_set,
    load_records,
)


def test_seed_format_is_converted(v2_records_path):
    rs = load_records(v2_records_path)
    assert isinstance(rs, RecordSet) and len(rs) == 38
    assert rs.idle_power_w == pytest.approx(0.642048)
    r = rs[0]
    assert r.label == "d256_b16_s128_L3"
    assert r.total_flops == pytest.approx(88.5837e12)  # ground_truth_tf × 1e12
    assert r.mean_util == pytest.approx(0.9280936454849498)  # avg_gpu_pct / 100
    assert r.idle_power_w == pytest.approx(0.642048)  # idle_baseline_mw / 1000
    assert r.net_energy_j == pytest.approx(1106.6203824822098)
    assert r.dtype == "fp32" and r.config["d_model"] == 256
    assert r.raw["j_per_tflop"] == pytest.approx(12.492370294785722)  # every original key kept
    dtypes = {x.dtype for x in rs}
    assert dtypes == {"fp32", "tf32", "fp16", "bf16"}  # config.precision, absent = fp32
    assert rs[1:3].source == rs.source and len(rs[1:3]) == 2


def test_jsonl_roundtrip_and_append(tmp_path):
    p = tmp_path / "runs.jsonl"
    rec = {
        "label": "a",
        "dtype": "float32",
        "net_energy_j": 100.0,
        "duration_s": 10.0,
        "total_flops": 1e13,
        "mean_util": 0.9,
        "tb_moved": None,
        "config": {"d_model": 64},
        "simulated": True,
    }
    append_record(p, rec)
    append_record(p, WorkloadRecord(label="b", net_energy_j=50.0, duration_s=5.0, total_flops=5e12))
    lines = p.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(x)["schema"] == RECORD_SCHEMA for x in lines)
    rs = load_records(p, require=("net_energy_j", "duration_s", "total_flops"))
    assert rs.labels == ["a", "b"]
    assert rs[0].dtype == "fp32" and rs[0].simulated and rs[0].tb_moved is None
    assert rs[0].to_dict()["config"] == {"d_model": 64}


def test_append_never_rewrites_and_survives_a_torn_last_line(tmp_path):
    p = tmp_path / "runs.jsonl"
    append_record(p, {"label": "a", "net_energy_j": 1.0, "duration_s": 1.0})
    with open(p, "ab") as fh:  # a crash mid-write left a partial line
        fh.write(b'{"label": "tor')
    before = p.read_bytes()
    append_record(p, {"label": "c", "net_energy_j": 2.0, "duration_s": 1.0})
    after = p.read_bytes()
    assert after.startswith(before)  # nothing already written was touched
    with pytest.raises(InputError, match="line 2: invalid JSON"):
        load_records(p)
    # the new record starts on its own line, intact
    assert json.loads(after.decode().splitlines()[-1])["label"] == "c"


def test_append_refuses_nan_and_missing_label(tmp_path):
    p = tmp_path / "runs.jsonl"
    with pytest.raises(InputError, match="net_energy_j"):
        append_record(p, {"label": "x", "net_energy_j": math.nan, "duration_s": 1.0})
    with pytest.raises(InputError, match="label"):
        append_record(p, {"net_energy_j": 1.0})
    assert not p.exists() or p.read_text() == ""


def test_required_fields_depend_on_use(tmp_path):
    p = tmp_path / "r.jsonl"
    append_record(p, {"label": "a", "net_energy_j": 1.0, "duration_s": 1.0})
    assert load_records(p)[0].total_flops is None  # estimation does not need ground truth
    with pytest.raises(InputError, match="'total_flops'"):
        load_records(p, require=("net_energy_j", "duration_s", "total_flops"))


def test_message_names_file_record_and_field(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text(json.dumps({"label": "run7", "net_energy_j": -3, "duration_s": 1}) + "\n")
    with pytest.raises(InputError) as ei:
        load_records(p)
    e = ei.value
    assert (e.file, e.record, e.field) == (str(p), "run7", "net_energy_j")
    assert str(e).startswith(f"{p}: record 'run7': field 'net_energy_j': ")


def test_unlabelled_record_is_named_by_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('\n{"net_energy_j": 1, "duration_s": 1}\n')
    with pytest.raises(InputError, match="record 'line 2': field 'label'"):
        load_records(p)


def test_unreadable_inputs(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_records(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match="is a directory"):
        load_records(tmp_path)
    b = tmp_path / "bin.jsonl"
    b.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="UTF-8"):
        load_records(b)


def test_as_record_set_accepts_plain_sequences():
    rs = as_record_set([WorkloadRecord(label="a", net_energy_j=1.0, duration_s=1.0, idle_power_w=0.5)])
    assert rs.idle_power_w == 0.5 and rs.source == "<memory>"
    with pytest.raises(InputError):
        as_record_set([{"label": "a"}])  # type: ignore[list-item]


def test_append_is_one_write_per_record(tmp_path, monkeypatch):
    """One os.write per record (O_APPEND makes it atomic with respect to other appenders) then fsync."""
    calls = []
    real_write, real_fsync = os.write, os.fsync
    monkeypatch.setattr(
        os, "write", lambda fd, data: calls.append(("write", len(data))) or real_write(fd, data)
    )
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(("fsync", 0)) or real_fsync(fd))
    append_record(tmp_path / "r.jsonl", {"label": "a", "net_energy_j": 1.0, "duration_s": 1.0})
    assert [c[0] for c in calls] == ["write", "fsync"]


def test_byte_order_mark_is_accepted(tmp_path):
    p = tmp_path / "bom.jsonl"
    p.write_bytes(
        b"\xef\xbb\xbf" + json.dumps({"label": "a", "net_energy_j": 1.0, "duration_s": 1.0}).encode()
    )
    assert load_records(p).labels == ["a"]
