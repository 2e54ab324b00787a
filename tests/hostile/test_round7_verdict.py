"""Round 8 red team on runs and monitor rows, by principle: every number a record or a ledger row gives is a claim
that may widen a bound or block "below", never tighten it — including what the join copies from a runner's record
and a duration that its own timestamps contradict.

Each test builds an honest heavy run on the SIMULATED twins (flopwatch.sim, seed 2; every number here is simulated)
so that the truth is known, attacks it with a threshold under the truth, and asserts: never "below", a named
warning or a sound bound over the truth, and that the honest case still reads what it did. Fixes, each at the
principle's one place: ``join.join_records`` starts every record from ``records.unmeasured`` (a runner's own
sensor observables and energy never pass the join); ``estimate.observe.widened_to_span`` (called by ``assess``,
the one rule for records and rows) widens a duration to the run's own timestamps. Table: docs/threat-model.md,
"Round 8 (runs and monitor rows)".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from flopwatch.cli import main
from flopwatch.estimate.verdict import assess_record
from flopwatch.evaluate.window import reassess_row
from flopwatch.join import join_records
from flopwatch.records import SENSOR_KEYS, WorkloadRecord, load_records
from flopwatch.redteam.simulated import sim_profile, to_record

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared simulated observables
from sound_helpers import never_below as _never_below
from sound_helpers import sim_run  # noqa: E402

# ----------------------------------------------------------------------------- what the join copies from a runner
_GPT = {
    "arch": "gpt",
    "d_model": 1024,
    "num_layers": 8,
    "batch_size": 16,
    "seq_len": 1024,
    "precision": "bf16",
}


@pytest.fixture(scope="module")
def h100_trace(tmp_path_factory) -> tuple[Path, list[dict]]:
    """A SIMULATED H100 trace (30 s idle, one bf16 GPT run of 300 steps, 10 s idle) and the runner's record."""
    d = tmp_path_factory.mktemp("r8")
    (d / "s.json").write_text(json.dumps([{"idle_s": 30}, {"config": _GPT, "steps": 300}, {"idle_s": 10}]))
    trace, recs = d / "t.parquet", d / "r.jsonl"
    assert main(["sim", "trace", "h100", "--schedule", str(d / "s.json"), "-o", str(trace), "--records",
                 str(recs)]) == 0  # fmt: skip
    return trace, [json.loads(x) for x in recs.read_text().splitlines()]


#: What a runner may write into its own record that only a sensor measures (the pipe counters over all of the run,
#: an SM clock range, no blind time, a point-sensor-friendly rate): each value would tighten the sound bound.
_RUNNER_SAYS = {
    "pipe_active_s": {"tensor": 0.01, "fp64": 0.0, "fp32": 0.0, "fp16": 0.0},
    "pipe_observed_s": 1e6,
    "min_sm_clock_mhz": 1980.0,
    "max_sm_clock_mhz": 1.0,
    "unobserved_s": 0.0,
    "sample_rate_hz": 1e6,
}


def _joined(tmp: Path, trace: Path, lines: list[dict], name: str) -> WorkloadRecord:
    src, out = tmp / f"{name}.jsonl", tmp / f"{name}-joined.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert main(["join", str(trace), str(src), "-o", str(out)]) == 0
    (r,) = load_records(out, require=("net_energy_j", "duration_s", "total_flops"))
    return r


def test_the_join_does_not_carry_a_runners_own_counters(h100_trace, tmp_path, capsys):
    """`join-keeps-runner-counters`: the runner's record (the other side's) carries ``pipe_active_s`` of 0.01 s
    over ``pipe_observed_s`` 1e6 s, a clock range and no blind time. ``flopwatch join`` replaced the measured
    energy, duration, utilisation and coverage, but every other key of the runner's record survived into the
    verifier's joined record, so the whole-coverage pipe bound held the H100 run at 0.014 × the truth: "below" at
    0.9 × truth. The join now starts from ``records.unmeasured``: only the trace's observables pass."""
    trace, lines = h100_trace
    honest = _joined(tmp_path, trace, lines, "honest")
    forged = _joined(tmp_path, trace, [{**x, **_RUNNER_SAYS} for x in lines], "forged")
    capsys.readouterr()
    assert not any(k in forged.extra for k in set(_RUNNER_SAYS) - {"sample_rate_hz"})
    assert (
        forged.raw.get("sample_rate_hz") == honest.raw.get("sample_rate_hz") == 10.0
    )  # the trace's, not 1e6
    truth = float(forged.total_flops)  # type: ignore[arg-type]
    a = assess_record(None, forged, threshold_flops=0.9 * truth)
    h = assess_record(None, honest, threshold_flops=0.9 * truth)
    _never_below(a, truth)
    assert a.upper_flops >= truth and a.upper_flops == pytest.approx(
        h.upper_flops
    )  # the honest bound, exactly
    assert a.verdict == h.verdict == "uncertain"
    # the honest control: at a threshold over the (sound) bound the honest joined run still reads "below"
    assert assess_record(None, honest, threshold_flops=1.01 * h.upper_flops).verdict == "below"


def test_a_record_the_trace_did_not_measure_keeps_no_energy_of_the_runners(h100_trace):
    """`join-keeps-runner-counters`, unjoined: a runner's record that names its own ``net_energy_j`` (1 J) and
    sensor observables, for a run the trace did not see (its timestamps after the trace), came out of the join as
    "not detected" still holding them: ``flopwatch estimate`` on the joined file then judged the runner's 1 J.
    A record the join gives no segment now has no energy (docs/architecture.md, "Join": it gets no energy)."""
    from types import SimpleNamespace

    _, lines = h100_trace
    d = {
        **lines[0],
        **_RUNNER_SAYS,
        "net_energy_j": 1.0,
        "duration_s": 12.5,
        "mean_util": 0.99,
        "coverage": 1.0,
    }
    d.update(start_monotonic_s=1e4, end_monotonic_s=1e4 + 12.5)
    det = SimpleNamespace(segments=[], idle_power_w=70.0)
    res = join_records([WorkloadRecord.from_dict(d)], det, t0_s=0.0)
    (r,) = res.records
    assert r.join == {"status": "not detected"} and not r.measured
    assert r.mean_util is None and r.coverage is None and not any(k in r.extra for k in SENSOR_KEYS)
    assert r.total_flops == lines[0]["total_flops"] and r.label == lines[0]["label"]  # what ran stays


# --------------------------------------------------------------------------- a duration under its own timestamps
def _short_record(acc, run, k: float) -> dict:  # noqa: ANN001
    """The nvml-blind run (the counter sees 1 % of the energy) as a record naming NVML at 10 Hz, its runner's
    timestamps the whole run, its ``duration_s`` divided by ``k`` (SIMULATED)."""
    d = to_record(acc, run).to_dict()
    d.update(net_energy_j=0.01 * d["net_energy_j"], sensor_kind="nvml", sample_rate_hz=10.0,
             start_monotonic_s=run.start_s, end_monotonic_s=run.end_s, duration_s=d["duration_s"] / k)  # fmt: skip
    return d


@pytest.mark.parametrize("key", ["a100", "h100"])
def test_a_duration_under_the_records_own_timestamps_is_widened_to_them(family, key):
    """`duration-under-timestamps`: the nvml-blind attack on a record whose ``duration_s`` is a tenth of what its
    own ``start_monotonic_s``/``end_monotonic_s`` span. The sensor's blind share (75 % at peak) and the rate
    bound were taken over the edited duration: A100 0.29 × truth, H100 0.75 ×, "below" at 0.9 × truth. The
    timestamps are claims as the duration is: the run is bounded over the longest, the rest unobserved."""
    acc, run = sim_run(key, family[0])
    truth = float(run.total_flops)
    a = assess_record(
        None, WorkloadRecord.from_dict(_short_record(acc, run, 10.0)), threshold_flops=0.9 * truth
    )
    _never_below(a, truth, "the run's timestamps span")
    assert a.upper_flops >= truth
    # the honest control: the same record with its true duration reads as before (no warning, same bound)
    h = assess_record(
        None, WorkloadRecord.from_dict(_short_record(acc, run, 1.0)), threshold_flops=0.9 * truth
    )
    assert not any("timestamps span" in w for w in h.warnings) and h.upper_flops >= truth
    assert a.upper_flops >= h.upper_flops * 0.999


def test_a_duration_shaved_within_the_slack_still_covers_the_timestamps(family):
    """Under the warning's slack (2 detector polls + 5 %: a joined segment may start late) the excess is still
    unobserved time: shaving 4 % off the duration gives no warning and no tighter bound."""
    acc, run = sim_run("a100", family[0])
    truth = float(run.total_flops)
    h = assess_record(
        None, WorkloadRecord.from_dict(_short_record(acc, run, 1.0)), threshold_flops=0.9 * truth
    )
    a = assess_record(
        None, WorkloadRecord.from_dict(_short_record(acc, run, 1.04)), threshold_flops=0.9 * truth
    )
    assert not any("timestamps span" in w for w in a.warnings)
    assert a.upper_flops >= h.upper_flops * 0.999


def test_a_ledger_rows_duration_under_its_sensor_times_is_widened(family, a100_profile):
    """`duration-under-timestamps` on a ledger row (`flopwatch verdict --profile`, ``reassess_row``): the row's
    ``start_t_s``/``end_t_s`` (the sensor's monotonic time) span the run, its ``duration_s`` a tenth: upper 0.29 ×
    truth before. A row made by the daemon has ``duration_s == end_t_s − start_t_s``: it reads as before."""
    acc, run = sim_run("a100", family[0])
    truth = float(run.total_flops)
    d = _short_record(acc, run, 10.0)
    row = {**d, "start_t_s": run.start_s, "end_t_s": run.end_s, "profile_sha256": a100_profile.sha256()}
    r = reassess_row(row, a100_profile)
    assert r["upper_flops"] >= truth and any("the run's timestamps span" in w for w in r["warnings"])
    ok = reassess_row({**row, "duration_s": run.end_s - run.start_s}, a100_profile)
    assert not any("timestamps span" in w for w in ok["warnings"]) and ok["upper_flops"] >= truth


def test_estimate_reads_the_records_timestamps(tmp_path, capsys, family):
    """The same attack through ``flopwatch estimate``: "uncertain", the warning in the JSON, bound over the truth."""
    acc, run = sim_run("a100", family[0])
    truth = float(run.total_flops)
    (tmp_path / "r.jsonl").write_text(json.dumps(_short_record(acc, run, 10.0)) + "\n")
    sim_profile("a100", family, "bf16").save(tmp_path / "p.json")
    assert main(["estimate", "--profile", str(tmp_path / "p.json"), str(tmp_path / "r.jsonl"), "--threshold",
                 repr(0.9 * truth), "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    (r,) = out["records"] + out["skipped"]
    assert r["threshold_verdict"] == "uncertain" and r["upper_flops"] >= truth
    assert any("the run's timestamps span" in w for w in r["warnings"])


def test_the_registry_runs_the_duration_family(capsys):
    """`flopwatch redteam --family duration-under-timestamps` (a tenth of the run's duration and energy reported,
    its timestamps spanning all of it; A100/H100/H200 twins): "below" at 0.26–0.60 × truth before; now no wrong
    "below" and every bound over the truth."""
    assert main(["redteam", "--quick", "--family", "duration-under-timestamps", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_families"] == 1 and len(out["attacks"]) == 3
    assert out["wrong_below"] == 0 and out["upper_bound_violations"] == 0
    assert all(a["verdict"] != "below" and a["upper_over_truth"] >= 1.0 for a in out["attacks"])


def test_a_rows_timestamps_that_run_backwards_block_below(family, a100_profile):
    """`timestamps-backwards`: the row of the duration attack above with no sensor time and its wall times
    swapped (``end_wall`` before ``start_wall``): a pair that runs backwards was ignored, so the tenth duration
    stood with no word: 0.29 × truth, "below" at 0.5 × truth. How long the run took is then not known: a warning."""
    acc, run = sim_run("a100", family[0])
    truth = float(run.total_flops)
    d = _short_record(acc, run, 10.0)
    del d["start_monotonic_s"], d["end_monotonic_s"]
    w0 = 1.7e9
    row = {
        **d,
        "start_wall": w0 + (run.end_s - run.start_s),
        "end_wall": w0,
        "profile_sha256": a100_profile.sha256(),
    }
    r = reassess_row(row, a100_profile)
    assert any("end before they start" in w for w in r["warnings"]), r["warnings"]
    # the wall pair in order (and no sensor time): the span is the wall's, widened as above
    ok = reassess_row({**row, "start_wall": w0, "end_wall": w0 + (run.end_s - run.start_s)}, a100_profile)
    assert ok["upper_flops"] >= truth and any("timestamps span" in w for w in ok["warnings"])


@pytest.mark.parametrize("rate", [0.0, -1.0])
def test_a_rate_of_zero_keeps_the_sensors_blind_share(family, rate):
    """`rate-zero`: the nvml-blind record (NVML, the counter sees 1 % of the energy, ``unobserved_s: 0``) with
    ``sample_rate_hz`` 0 or −1. A rate ≤ 0 dropped every sampling check and with it NVML's 75 % blind share:
    bound 0.12 × truth, kept from "below" only by the flat-rate warning. The rate is now "none recorded" (the
    counter judged at its own need, its blind share at peak) and still named: bound ≥ truth, never "below"."""
    acc, run = sim_run("a100", family[0])
    truth = float(run.total_flops)
    d = {**_short_record(acc, run, 1.0), "sample_rate_hz": rate, "unobserved_s": 0.0}
    a = assess_record(None, WorkloadRecord.from_dict(d), threshold_flops=0.5 * truth)
    _never_below(a, truth, "sampling rate")
    assert a.upper_flops >= truth


@pytest.mark.parametrize("rate", [None, 0.0])
def test_a_point_sensor_without_a_rate_leaves_the_whole_run_unobserved(family, rate):
    """`point-sensor-rateless`: the Orin's INA3221 (point readings, no counter) recorded without a usable rate, the
    record's energy 1 % of the run's, ``unobserved_s: 0``. Named ("recorded without a sampling rate"), but no share
    of the run was taken as unobserved: a blocked bound of 0.057 × truth. What a point sensor saw without a rate is
    unknown: the whole run is now unobserved (bounded at peak), 3.5 × truth; with its rate (200 Hz) as before."""
    acc, run = sim_run("orin-nano", family[0])
    truth = float(run.total_flops)
    d = to_record(acc, run).to_dict()
    d.update(
        net_energy_j=0.01 * d["net_energy_j"], unobserved_s=0.0, sensor_kind="jetson", sample_rate_hz=rate
    )
    a = assess_record(None, WorkloadRecord.from_dict(d), threshold_flops=0.5 * truth)
    _never_below(a, truth, "recorded without a sampling rate")
    assert a.upper_flops >= truth
    ok = assess_record(
        None, WorkloadRecord.from_dict({**d, "sample_rate_hz": 200.0}), threshold_flops=0.5 * truth
    )
    assert ok.warnings == () and ok.upper_flops >= truth
