"""The red team's and the benchmarks' real-data and twin paths judged with the sensor context the data had.

A row that does not say how it was observed is judged at its device's least-observed sensor (round 7); a row that
does is judged as that sensor at its rate. These paths used to call ``assess`` without a context, so the real
Jetson v2 records (the INA3221 rail VDD_CPU_GPU_CV read at 2 Hz, data/jetson_flop_estimator/SOURCE.md) were judged
as if fully observed, and a twin's records named no sensor. Each test judges the same run with and without the
context and asserts the context is what moved the answer. Twin numbers are SIMULATED.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from flopwatch.cli import main
from flopwatch.estimate.verdict import assess_record
from flopwatch.records import WorkloadRecord
from flopwatch.redteam import real
from flopwatch.redteam.engine import World
from flopwatch.redteam.families import FAMILY_BY_KEY
from flopwatch.redteam.judge import judge
from flopwatch.redteam.simulated import honest_run, make_acc, to_record, twin_context
from flopwatch.redteam.suite import judge_honest, real_honest_results

RATE_WARNING = "sampling rate below the device's need"
NO_SENSOR = "no sensor recorded"


@pytest.fixture(scope="module")
def v2(v2_records_path):  # noqa: ANN001, ANN201
    return v2_records_path


# ------------------------------------------------------------------------------------------- the real records
def test_the_v2_context_is_the_ina3221_rail_at_the_records_own_2_hz(v2):
    from flopwatch.records import load_records

    for r in load_records(v2):
        c = real.v2_context(r)
        assert c["sensor_kind"] == "ina3221" and c["sensor_spec"] == "jetson:VDD_CPU_GPU_CV"
        assert 1.99 <= c["sample_rate_hz"] <= 2.01  # n_power_samples / duration_s, per SOURCE.md "2 Hz"
    bare = WorkloadRecord(label="x", net_energy_j=1.0, duration_s=10.0)
    assert real.v2_context(bare)["sample_rate_hz"] == real.V2_RATE_HZ  # no sample count: the documented rate


def test_real_honest_runs_are_judged_with_their_sensor_and_never_read_a_wrong_verdict(v2):
    honest = list(real_honest_results(v2))
    assert len(honest) == 38
    for h in honest:
        # at 2 Hz the INA3221 (a 1.1 ms reading every 6.6 ms, no counter) sees 0.2 % of the run: never "below"
        assert h.decisive_at == {"energy": None}, (h.label, h.decisive_at)
        assert (
            h.verdict_at_truth != "below" and h.verdict_double != "below"
        )  # below a threshold: undetermined
        assert h.verdict_half != "below"  # above a threshold: never "below"
        assert not h.false_above
        assert RATE_WARNING in h.blocked_by and h.to_dict()["blocked_by"] == h.blocked_by  # why "never", said


def test_redteam_says_why_the_orin_is_never_below(v2, capsys, monkeypatch):
    from flopwatch.cli.redteam_cmds import _never_lines

    monkeypatch.setenv("COLUMNS", "400")
    honest = [h.to_dict() for h in real_honest_results(v2)]
    (line,) = _never_lines(honest)  # one line for the device, whatever each run's own rate
    assert line.startswith("never on orin-nano (real, v2) (38 of 38 runs): " + RATE_WARNING)
    assert main(["redteam", "--quick", "--family", "own-profile-real"]) == 0
    out = capsys.readouterr().out
    assert "never on orin-nano (real, v2) (38 of 38 runs)" in out and "never on sim:orin-nano" in out


def test_the_same_real_record_is_decisive_without_its_sensor_and_not_with_it(v2):
    (r, prof, vals) = next(x for x in real.real_honest(v2) if x[0].label == "d384_b16_s128_L3")
    T = 50.0 * float(
        r.total_flops
    )  # far above the run: only the sensor's blind time can keep it from "below"
    bare = judge(prof, vals, device="orin-nano", threshold_flops=T)  # as the suite judged it before
    seen = judge(prof, vals, device="orin-nano", threshold_flops=T, context=real.v2_context(r))
    assert bare.verdict == "below" and bare.warnings == ()
    assert seen.verdict == "uncertain" and seen.decisive_at_flops is None
    assert any(RATE_WARNING in w and "ina3221" in w and "99.8%" in w for w in seen.warnings), seen.warnings
    assert seen.upper_flops >= bare.upper_flops  # the context only adds blind time: never a tighter bound


def test_a_low_utilisation_real_record_gets_a_looser_bound_with_its_sensor(v2):
    r, prof, vals = next(x for x in real.real_honest(v2) if (x[0].mean_util or 1.0) < 0.5)
    bare = judge(prof, vals, device="orin-nano", threshold_flops=1.0)
    seen = judge(prof, vals, device="orin-nano", threshold_flops=1.0, context=real.v2_context(r))
    assert seen.upper_flops > 1.5 * bare.upper_flops  # 99.8 % of the run at the peak rate, not its energy
    assert seen.upper_flops >= float(r.total_flops)


@pytest.mark.parametrize("key", ["low-util-real", "replay-sensor-real", "own-profile-real"])
def test_real_attack_cases_carry_the_records_sensor_and_rate(v2, key):
    from flopwatch.redteam.suite import cases

    cs = list(cases(World(quick=True), FAMILY_BY_KEY[key], v2))
    assert cs
    for c in cs:
        assert c.context is not None and 1.99 <= c.context["sample_rate_hz"] <= 2.01
        # what the family's node claims stays (a replayed sensor, its own profile); the rest is the record's
        want = {"replay-sensor-real": "replay", "own-profile-real": "jetson"}.get(key, "ina3221")
        assert c.context["sensor_kind"] == want


# ------------------------------------------------------------------------------------------------- the twins
@pytest.mark.parametrize(("key", "kind", "rate"), [("h100", "nvml (simulated)", 1 / 1.5), ("orin-nano", "ina3221 (simulated)", 10.0)])  # fmt: skip
def test_to_record_carries_the_twins_sensor_and_rate(family, key, kind, rate):
    w = family[0] if key != "orin-nano" else World(quick=True).family("orin-nano")[0]
    acc = make_acc(key, 2)
    acc.idle(10.0)
    run = acc.run(w, duration_s=60.0)
    d = to_record(acc, run).to_dict()
    assert d["sensor_kind"] == kind and d["sample_rate_hz"] == pytest.approx(rate)
    assert d["simulated"] is True and twin_context(acc) == {
        "sensor_kind": kind,
        "sample_rate_hz": d["sample_rate_hz"],
    }
    with_sensor = assess_record(None, WorkloadRecord.from_dict(d))
    bare = {k: v for k, v in d.items() if k not in ("sensor_kind", "sample_rate_hz")}
    without = assess_record(None, WorkloadRecord.from_dict(bare))
    # the record now says how it was observed: no "no sensor recorded" note, and its own sensor's blind share
    assert not any(NO_SENSOR in n for n in with_sensor.notes)
    assert any(NO_SENSOR in n for n in without.notes)
    assert with_sensor.upper.unobserved_flops > 0
    if key == "orin-nano":  # the INA3221 it emulates, read at 10 Hz: below its need, blocks "below"
        assert any(RATE_WARNING in w for w in with_sensor.warnings)
        assert with_sensor.upper_flops >= without.upper_flops


def test_the_orin_twins_honest_runs_are_judged_as_the_sensor_the_twin_emulates():
    w = World(quick=True)
    wd = w.family("orin-nano")[0]
    acc, r, vals = honest_run("orin-nano", wd, w.attack_seed)
    prof, _ = w.profile("orin-nano", [wd.label])
    kw = dict(spec="orin-nano", truth=r.total_flops, device="sim:orin-nano", label=wd.label, dtype="fp32",
              simulated=True, sets=("energy", "+clock+pl"))  # fmt: skip
    bare = judge_honest(prof, vals, context=None, **kw)
    seen = judge_honest(prof, vals, context=twin_context(acc), **kw)
    assert all(v is not None and v >= 1.0 for v in bare.decisive_at.values())  # the old figure (× 15–26)
    assert seen.decisive_at == {"energy": None, "+clock+pl": None}
    assert not seen.false_above and seen.verdict_at_truth != "below"


def test_a_datacentre_twins_honest_run_keeps_its_bound_with_its_counter():
    """NVML's energy counter is cumulative: its blind 75 % was already the twin's ``unobserved_s``, so the
    context changes nothing there (the sim:a100/h100/h200 rows of docs/redteam.md stand)."""
    w = World(quick=True)
    wd = w.family("h100")[0]
    acc, r, vals = honest_run("h100", wd, w.attack_seed)
    prof, _ = w.profile("h100", [wd.label])
    kw = dict(
        spec="h100", truth=r.total_flops, device="sim:h100", label=wd.label, dtype=wd.dtype, simulated=True
    )
    bare = judge_honest(prof, vals, context=None, **kw)
    seen = judge_honest(prof, vals, context=twin_context(acc), **kw)
    assert seen.decisive_at == bare.decisive_at and all(v is not None for v in seen.decisive_at.values())


# ---------------------------------------------------------------------------------------- the plain outputs
def _sensorless(family) -> tuple[list[dict], float]:  # noqa: ANN001
    acc = make_acc("a100", 2)
    acc.idle(10.0)
    out, truth = [], 0.0
    for w in family[:2]:
        d = to_record(acc, acc.run(w, duration_s=60.0)).to_dict()
        del d["sensor_kind"], d["sample_rate_hz"]
        out.append(d)
        truth = max(truth, float(d["total_flops"]))
        acc.idle(10.0)
    return out, truth


def test_estimate_prints_the_no_sensor_note_once_without_json(
    tmp_path, capsys, monkeypatch, family, a100_profile
):
    monkeypatch.setenv("COLUMNS", "400")  # one line (a narrow terminal wraps it, as every line)
    recs, _ = _sensorless(family)
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(d) + "\n" for d in recs))
    a100_profile.save(tmp_path / "p.json")
    argv = [
        "estimate",
        "--profile",
        str(tmp_path / "p.json"),
        str(tmp_path / "r.jsonl"),
        "--threshold",
        "1e18",
    ]
    assert main(argv) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if NO_SENSOR in x]
    assert len(lines) == 1 and lines[0].startswith("note (2 of 2 records): no sensor recorded"), lines
    assert "75.0% of the time blind" in lines[0] and lines[0].endswith("record the sensor kind and rate")
    # a record that names its sensor gets no such line
    (tmp_path / "s.jsonl").write_text(
        json.dumps({**recs[0], "sensor_kind": "nvml", "sample_rate_hz": 10.0}) + "\n"
    )
    assert main([*argv[:3], str(tmp_path / "s.jsonl"), *argv[4:]]) == 0
    assert NO_SENSOR not in capsys.readouterr().out


def test_verdict_prints_the_no_sensor_note_without_json(tmp_path, capsys, monkeypatch, a100_profile):
    from flopwatch.monitor.ledger import Ledger

    monkeypatch.setenv("COLUMNS", "400")
    row = {"workload_id": "s/gpu0/0", "device": "gpu0", "device_name": "NVIDIA A100-SXM4-80GB",
           "start_wall": 1.7e9, "end_wall": 1.7e9 + 60.0, "duration_s": 60.0, "net_energy_j": 12000.0,
           "mean_util": 0.95, "idle_power_w": 60.0, "coverage": 1.0}  # fmt: skip
    led = tmp_path / "ledger.db"
    with Ledger(led) as lg:
        lg.append("workload", row)
    a100_profile.save(tmp_path / "p.json")
    argv = ["verdict", str(led), "--threshold", "1e18", "--profile", str(tmp_path / "p.json")]
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    (note,) = [n for n in d["notes"] if NO_SENSOR in n]
    assert note.startswith("1 of 1 row(s): no sensor recorded") and "75.0% of the time blind" in note
    assert main(argv) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if NO_SENSOR in x]
    assert lines == [f"note: {note}"]
    # a row naming its sensor: no note
    with Ledger(tmp_path / "l2.db") as lg:
        lg.append("workload", {**row, "sensor_kind": "nvml", "sample_rate_hz": 10.0})
    assert main(["verdict", str(tmp_path / "l2.db"), *argv[2:], "--json"]) == 0
    assert not any(NO_SENSOR in n for n in json.loads(capsys.readouterr().out)["notes"])


def test_the_twin_records_bound_never_tightens_with_its_context(family):
    """The context may only add blind time and warnings (round 6): a twin record's bound with its sensor is at
    least its bound as a fully observed observation."""
    from flopwatch.estimate.verdict import assess, observables_from_record

    acc = make_acc("a100", 2)
    acc.idle(10.0)
    rec = to_record(acc, acc.run(family[0], duration_s=60.0))
    obs = dataclasses.replace(observables_from_record(rec), unobserved_s=0.0)
    full = assess(None, obs, device="a100")  # no context: the caller's own 0 s unobserved
    ctx = assess(None, obs, device="a100", context=twin_context(acc))
    assert ctx.upper_flops >= full.upper_flops and math.isfinite(ctx.upper_flops)
