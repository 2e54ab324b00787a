"""Round 7 (the hole round 6 left open): a record that does not say how it was observed.

A record with no sensor kind was judged as if a cumulative counter had seen every second, so the nvml-blind attack
(work inside NVML's blind 75 ms of every 100 ms: the counter sees 1 % of the energy) on a record that omits its
sensor was "below" in ``estimate``, and ``run``'s own records never carried their sensor. Now
(``estimate/verdict.py`` ``assess``, the one place every record and row goes through): a row or record that names no
sensor is judged at its device's least-observed power/energy sensor in the timing table
(``sensor_timing.unrecorded_sensor_floor``), with one named note (not a blocker: the bound is still sound); and the
verifier's own records (``flopwatch join``, ``flopwatch run``) carry the trace's sensor kind, rate and spec
(``join.trace_context``; the twin's read-out as the sensor it emulates, labelled simulated).

Built on the SIMULATED twins (flopwatch.sim, seed 2; every number here is simulated), truth known.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.devices import get_device
from flopwatch.estimate.verdict import assess, assess_record, observables_from_record
from flopwatch.evaluate.window import reassess_row
from flopwatch.records import WorkloadRecord, load_records
from flopwatch.redteam.simulated import sim_profile, to_record
from flopwatch.sensor_timing import least_observed, unrecorded_sensor_floor
from flopwatch.sim.accelerator import SimulatedAccelerator

NOTE = "no sensor recorded"


def _record(key: str, workload, s: float = 60.0) -> tuple[dict, float]:  # noqa: ANN001
    """A twin run's record that names no sensor (``to_record`` now records the twin's: dropped here)."""
    acc = SimulatedAccelerator(key, seed=2)
    acc.idle(10.0)
    run = acc.run(workload, duration_s=s)
    d = to_record(acc, run).to_dict()
    del d["sensor_kind"], d["sample_rate_hz"]
    return d, float(run.total_flops)


@pytest.mark.parametrize("key", ["a100", "h100", "h200", "orin-nano"])
def test_the_nvml_blind_attack_on_a_record_naming_no_sensor_is_not_below(family, key):
    """The nvml-blind attack (the counter sees 1 % of the energy) on a record that names no sensor and says
    ``unobserved_s: 0``: before, 0.06–0.31 × truth and "below" at 0.5 × truth; now the device's least-observed
    sensor's blind share (NVML 75 %, the Orin's INA3221 83 %) is at peak rate: bound ≥ truth, with the note."""
    d, truth = _record(key, family[0])
    d.update(net_energy_j=0.01 * d["net_energy_j"], unobserved_s=0.0)
    a = assess_record(None, WorkloadRecord.from_dict(d), threshold_flops=0.5 * truth)
    assert a.verdict != "below" and a.upper_flops >= truth, (a.verdict, a.upper_flops / truth)
    assert sum(NOTE in n for n in a.notes) == 1 and not any(
        NOTE in w for w in a.warnings
    )  # a note, not a blocker
    frac = least_observed(key).blind_fraction
    assert frac >= 0.75 and a.upper.unobserved_flops > 0


def test_estimate_on_context_free_records_is_no_longer_below(tmp_path, capsys, family):
    """The same attack through ``flopwatch estimate`` (the CLI the round-6 report named): "uncertain", bound ≥
    truth, the note in ``--json``."""
    d, truth = _record("a100", family[0])
    d.update(net_energy_j=0.01 * d["net_energy_j"])
    (tmp_path / "r.jsonl").write_text(json.dumps(d) + "\n")
    sim_profile("a100", family, "bf16").save(tmp_path / "p.json")
    rc = main(["estimate", "--profile", str(tmp_path / "p.json"), str(tmp_path / "r.jsonl"), "--threshold",
               repr(0.5 * truth), "--json"])  # fmt: skip
    assert rc == 0
    (r,) = json.loads(capsys.readouterr().out)["records"]
    assert r["threshold_verdict"] != "below" and r["upper_flops"] >= truth
    assert any(NOTE in n for n in r["notes"])


def test_a_device_the_timing_table_does_not_know_is_bounded_at_peak_for_the_whole_run(family):
    """A record naming no sensor on a model with no power/energy sensor in the table (the L4): nothing says what
    any of its time was seen by, so the whole run is unobserved: the bound is the datasheet's peak × duration
    (sound; no "below" on a forged small energy unless T is over the peak-rate bound)."""
    assert least_observed("l4") is None and unrecorded_sensor_floor("l4")[0] == 1.0
    obs = observables_from_record(WorkloadRecord.from_dict(_record("a100", family[0])[0]))
    obs = dataclasses.replace(obs, net_energy_j=1.0, min_sm_clock_mhz=None, max_sm_clock_mhz=None)
    a = assess(None, obs, device="l4", context={})
    l4 = get_device("l4")
    assert a.upper.unobserved_flops == pytest.approx(max(l4.peak_flops.values()) * obs.duration_s, rel=1e-9)
    assert any("no power/energy sensor" in n for n in a.notes)
    # the caller's own observation (context None, e.g. the fleet's, whose unobserved_s says what its sensor
    # missed) is not a record: no floor from here
    assert assess(None, obs, device="l4").upper.unobserved_flops == 0.0


# ------------------------------------------------------------------------------------------ the verifier's records
_SCHEDULE = [
    {"idle_s": 20},
    {"config": {"arch": "gpt", "d_model": 1024, "num_layers": 8, "batch_size": 16, "seq_len": 1024,
                "precision": "bf16"}, "steps": 150},
    {"idle_s": 10},
]  # fmt: skip


@pytest.fixture(scope="module")
def joined(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("blind")
    (d / "s.json").write_text(json.dumps(_SCHEDULE))
    trace, records, out = d / "trace.parquet", d / "runs.jsonl", d / "joined.jsonl"
    assert main(["sim", "trace", "a100", "--schedule", str(d / "s.json"), "-o", str(trace), "--records",
                 str(records), "--rate", "10"]) == 0  # fmt: skip
    assert main(["join", str(trace), str(records), "-o", str(out), "--json"]) == 0
    return out


def test_a_join_made_record_carries_its_sensor_and_is_judged_as_the_monitor_row(joined, family, capsys):
    """`flopwatch join` copies the trace's sensor (the twin's NVML-like read-out: ``nvml (simulated)``), rate and
    spec into each joined record; judged by ``assess_record`` it gets exactly the bound of the equivalent monitor
    row (``verdict --profile``'s ``reassess_row``: the same observables and sensor context) — one rule — and the
    timing table's NVML blind share, without the no-sensor note."""
    capsys.readouterr()
    (r,) = load_records(joined)
    assert r.raw["sensor_kind"] == "nvml (simulated)" and r.raw["sample_rate_hz"] == 10.0 and r.simulated
    prof = sim_profile("a100", family, "bf16")
    a = assess_record(prof, r)
    row = {**r.to_dict(), "device": "gpu0"}  # a ledger row: the same observables, the daemon's context keys
    m = reassess_row(row, prof)
    assert m["upper_flops"] == pytest.approx(a.upper_flops, rel=1e-12)
    assert a.upper.unobserved_flops == pytest.approx(
        0.75 * r.duration_s * max(get_device("a100").peak_flops.values()), rel=1e-9
    )
    assert not any(NOTE in n for n in a.notes)
    # the same record with its sensor taken out: the device's least-observed sensor is NVML too, so the bound is
    # the same, now with the note
    bare = WorkloadRecord.from_dict(
        {k: v for k, v in r.to_dict().items() if k not in ("sensor_kind", "sensor_spec", "sample_rate_hz")}
    )
    b = assess_record(prof, bare)
    assert b.upper_flops == pytest.approx(a.upper_flops, rel=1e-12) and any(NOTE in n for n in b.notes)


def test_an_honest_join_made_record_still_reaches_below_far_enough_above(joined):
    """Decisiveness kept: the honest bf16 run on the A100 twin, energy only (no pipe counters in this trace), is
    bounded at 2.96 × its truth now that NVML's blind 75 % counts at peak rate: "below" at T = 4 × truth,
    "uncertain" at 2 × (and never "below" at 0.8 ×)."""
    (r,) = load_records(joined)
    truth = float(r.total_flops)
    ratio = assess_record(None, r).upper_flops / truth
    assert 1.0 <= ratio < 4.0, ratio
    assert assess_record(None, r, threshold_flops=4.0 * truth).verdict == "below"
    assert assess_record(None, r, threshold_flops=2.0 * truth).verdict == "uncertain"


def test_a_replayed_trace_joined_is_flagged(tmp_path, joined, capsys):
    """A trace recorded from a replay (``record --sensor replay:…``): the joined record says ``replay`` and the
    verdict flags it (a replay is not a measurement of the device judged), as a monitor row's."""
    from flopwatch.join import trace_context

    ctx = trace_context({"kind": "replay", "rate_hz": 10.0, "sensor_spec": "replay:old.parquet"})
    assert ctx["sensor_kind"] == "replay" and ctx["sample_rate_hz"] == 10.0
    (r,) = load_records(joined)
    rr = WorkloadRecord.from_dict({**r.to_dict(), **ctx})
    a = assess_record(None, rr, threshold_flops=1e30)
    assert a.verdict == "uncertain" and any("replay or simulation" in w for w in a.warnings)
    # the twin's own kind is never passed off as the real sensor: it says simulated
    sim = trace_context({"kind": "sim", "rate_hz": 10.0, "fingerprint": {"sensor_model": "ina3221"}})
    assert sim["sensor_kind"] == "ina3221 (simulated)"


def test_a_row_claiming_rapl_for_a_gpu_is_not_fully_observed(family):
    """RAPL measures the CPU package: its table entry held for every device ("*"), so a row on an A100 naming
    ``rapl`` at 10 Hz was read as a counter that sees all the time, and the nvml-blind attack was "below" (0.12 ×
    truth). RAPL is now the CPU's sensor only: on a GPU it is a sensor the table does not know (the whole run
    unobserved, "sensor timing unknown"); on the CPU it stays a full-time counter."""
    d, truth = _record("a100", family[0])
    d.update(net_energy_j=0.01 * d["net_energy_j"], sensor_kind="rapl", sample_rate_hz=10.0)
    a = assess_record(None, WorkloadRecord.from_dict(d), threshold_flops=0.5 * truth)
    assert a.verdict != "below" and a.upper_flops >= truth
    assert any("sensor timing unknown" in w for w in a.warnings)
    from flopwatch.sensor_timing import check_sampling

    assert (
        check_sampling("cpu", "rapl", 10.0).adequate
        and check_sampling("cpu", "rapl", 10.0).unobserved_fraction == 0
    )


def test_the_join_says_what_context_it_copied(tmp_path, capsys):
    """``flopwatch join`` reports the context its records carry (``--json``: ``context``; text: one line), and a
    trace of several devices gives each record its own device's sensor (``record --sensor a,b`` writes
    ``devices``)."""
    from flopwatch.join import trace_context

    (tmp_path / "s.json").write_text(json.dumps(_SCHEDULE))
    trace, records = tmp_path / "t.parquet", tmp_path / "r.jsonl"
    assert main(["sim", "trace", "h100", "--schedule", str(tmp_path / "s.json"), "-o", str(trace), "--records",
                 str(records), "--rate", "20"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["join", str(trace), str(records), "-o", str(tmp_path / "j.jsonl"), "--json"]) == 0
    ctx = json.loads(capsys.readouterr().out)["context"]
    assert ctx["sensor_kind"] == "nvml (simulated)" and ctx["sample_rate_hz"] == 20.0
    assert main(["join", str(trace), str(records), "-o", str(tmp_path / "k.jsonl")]) == 0
    assert "each joined record carries its sensor: nvml (simulated) at 20 Hz" in capsys.readouterr().out
    md = {"kind": "nvml", "rate_hz": 10.0, "devices": [
        {"device_id": "gpu0", "kind": "nvml"}, {"device_id": "cpu:rapl", "kind": "rapl"}]}  # fmt: skip
    assert trace_context(md, "cpu:rapl")["sensor_kind"] == "rapl"
    assert trace_context(md)["sensor_kind"] == ["nvml", "rapl"]  # no device named: every sensor of the trace
