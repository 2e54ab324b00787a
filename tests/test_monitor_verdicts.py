"""The monitor's rows and window gauge under evasion (issue 15 items 2, 5, 6), on SIMULATED H100s.

Every number here comes from flopwatch.sim digital twins (virtual clock, seeded), not from measurements: a
profile calibrated on honest bf16 runs at the default 700 W limit (session 1), then monitor runs in session 2 —
honest, an fp8 job under a 500 W cap, a bf16 job under a 200 W cap, a job split into chunks, and bursts under
the detection hysteresis.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from flopwatch.cli import main
from flopwatch.monitor import Monitor, MonitorConfig
from flopwatch.sim.accelerator import Idle, Run
from flopwatch.sim.sensor import from_spec
from monitor_helpers import AsMeasured, private_tmp  # noqa: F401 - autouse: temporary files under tmp_path

DEVICE = "h100"


@pytest.fixture(scope="module")
def family() -> list[Any]:
    from flopwatch.redteam.simulated import datacenter_family

    return datacenter_family("bf16", quick=True)


@pytest.fixture(scope="module")
def profile_path(family, tmp_path_factory) -> Path:  # noqa: ANN001
    """bf16 profile from honest runs (session 1), without the configuration the tests run (family[0])."""
    from flopwatch.redteam.simulated import sim_profile

    prof = sim_profile(DEVICE, family, "bf16", exclude=family[0].label)
    return prof.save(tmp_path_factory.mktemp("prof") / "h100-bf16.json")


def _monitor(tmp_path: Path, profile_path: Path, schedule: list[Any], *, threshold: float | None,
             cap: float | None = None, duration: float = 130.0, name: str = "ledger.db",
             window_s: float = 86400.0, wall0: float = 1.7e9,
             as_measured: bool = False) -> tuple[Monitor, Any, float]:  # fmt: skip
    from flopwatch.estimate.profile import Profile

    sensors = from_spec(DEVICE, seed=2, power_cap_w=cap, schedule=schedule, wall0=wall0)
    if as_measured:  # the twin presented as a real NVML sensor (a simulated one is never "below")
        sensors = [AsMeasured(s, kind="nvml", spec_key=DEVICE) for s in sensors]
    cfg = MonitorConfig(
        sensors=[f"sim:{DEVICE}"],
        ledger=tmp_path / name,
        threshold_flops=threshold,
        duration_s=duration,
        verdict_window_s=window_s,
    )
    mon = Monitor(cfg, sensors=sensors, profile=Profile.load(profile_path))
    res = mon.run()
    truth = sum(r.total_flops for r in getattr(sensors[0], "inner", sensors[0]).accelerator.runs)
    return mon, res, truth


def _truth(workload: Any, cap: float | None) -> float:
    """Ground truth of one 60 s run of ``workload`` (the same twin and seed the monitor reads)."""
    (s,) = from_spec(DEVICE, seed=2, power_cap_w=cap, schedule=[Idle(30.0), Run(workload, duration_s=60.0)])
    return sum(r.total_flops for r in s.accelerator.runs)


def _one_job(workload: Any) -> list[Any]:
    return [Idle(30.0), Run(workload, duration_s=60.0), Idle(40.0)]


@pytest.mark.parametrize(
    "attack, cap, dtype, reasons",
    [
        ("fp8 job under a bf16 profile, 500 W cap", 500.0, "fp8", ("power_limit_w",)),
        ("bf16 job, 200 W cap", 200.0, "bf16", ("power_limit_w", "sm_clock_mhz")),
    ],
)
def test_an_evasive_workload_is_never_below_and_its_row_says_why(
    tmp_path, profile_path, family, attack, cap, dtype, reasons
):  # noqa: ANN001
    w = family[0] if dtype == "bf16" else dataclasses.replace(family[0], dtype=dtype, label=f"{dtype}-job")
    truth = _truth(w, cap)
    mon, res, run_truth = _monitor(tmp_path, profile_path, _one_job(w), threshold=0.8 * truth, cap=cap)
    assert run_truth == pytest.approx(truth)
    (row,) = res.workloads
    assert row["status"] == "complete" and row["simulated"] is True
    assert row["verdict"] != "below", attack
    assert row["regime"] == "out-of-regime"  # observed, whatever the profile's or the operator's precision
    assert row["power_limit_w"] == pytest.approx(cap) and row["mean_sm_clock_mhz"] > 0
    # out of regime is an assumption of the calibrated estimate (issue 21), said in the row; the verdict does
    # not rest on it: the sound bound alone keeps it from "below"
    text = row["assumptions"]
    for r in reasons:
        assert r in text, (r, text)
    # the evasion works on the point estimate (it alone says "below T"); the sound upper bound covers the truth
    assert row["estimate_flops"] < 0.8 * truth
    assert row["upper_flops"] is None or row["upper_flops"] >= truth


def test_an_honest_run_is_still_decided(tmp_path, profile_path, family):  # noqa: ANN001
    """Sound bounds around the truth; "above" under the lower one, "below" over the upper one, row and gauge.
    (SIMULATED H100; the monitor's rows see energy, mean clock and power limit, no pipe counters: the lower bound
    allows an honest fp32 run, the upper one fp8 at any clock, so the decisive factors are wide.)"""
    truth = _truth(family[0], None)
    _, res, _ = _monitor(tmp_path, profile_path, _one_job(family[0]), threshold=truth, name="probe.db",
                         as_measured=True)  # fmt: skip
    (probe,) = res.workloads
    lo, up = probe["lower_flops"], probe["upper_flops"]
    assert 0 < lo <= truth <= up and probe["decisive_at"] == pytest.approx(up / probe["estimate_flops"])
    for t, want in ((0.9 * lo, "above"), (1.1 * up, "below")):
        mon, res, _ = _monitor(tmp_path, profile_path, _one_job(family[0]), threshold=t, name=f"l{want}.db",
                               as_measured=True)  # fmt: skip
        (row,) = res.workloads
        assert row["regime"] == "calibrated" and row["warnings"] == [], row["warnings"]
        assert row["verdict"] == want
        v = mon.window_verdict  # the gauge too: it adds the 70 s outside the row that its sensor (NVML, blind
        # 75 %) did not see, at the fp8 peak (round 12, `outside-blind`: 1e17), so it is "below" only over that
        assert v is not None and v.upper_flops > row["upper_flops"] and "unseen by nvml" in v.notes[0]
        assert v.verdict == (want if want == "above" or t > v.upper_flops else "uncertain"), v


def _split_and_bursts(workload: Any) -> list[Any]:
    """Four detected 15 s chunks, then 20 bursts of 0.4 s every 6 s (under the hysteresis: no row)."""
    sched: list[Any] = [Idle(20.0)]
    for _ in range(4):
        sched += [Run(workload, duration_s=15.0), Idle(20.0)]
    for _ in range(20):
        sched += [Run(workload, duration_s=0.4), Idle(6.0)]
    return [*sched, Idle(20.0)]


def _cli_verdict(capsys, ledger: Path, threshold: float, profile_path: Path, window: str) -> dict[str, Any]:  # noqa: ANN001
    capsys.readouterr()
    args = [
        "verdict",
        str(ledger),
        "--threshold",
        f"{threshold!r}",
        "--window",
        window,
        "--profile",
        str(profile_path),
    ]
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["total"]


@pytest.mark.parametrize("k, window", [(0.8, "24h"), (0.3, "24h"), (3.0, "24h"), (0.8, "150s")])
def test_the_live_window_gauge_agrees_with_flopwatch_verdict(
    tmp_path, capsys, profile_path, family, k, window
):  # noqa: ANN001
    """A job split into chunks and bursts: the gauge at the end of the run and `flopwatch verdict --window`
    over the ledger it wrote give the same verdict and bounds; at 0.8 × truth neither says "below"."""
    from flopwatch.evaluate.window import parse_window

    sched = _split_and_bursts(family[0])
    (s,) = from_spec(DEVICE, seed=2, schedule=sched)
    truth = sum(r.total_flops for r in s.accelerator.runs)
    win = parse_window(window)
    mon, res, _ = _monitor(tmp_path, profile_path, sched, threshold=k * truth, duration=400.0, window_s=win)
    assert len(res.workloads) == 4  # the bursts left no row
    assert res.totals[f"sim:{DEVICE}"]["outside_busy_net_energy_j"] > 0
    g = mon.window_verdict
    assert g is not None
    cli = _cli_verdict(capsys, tmp_path / "ledger.db", k * truth, profile_path, window)
    assert cli["verdict"] == g.verdict
    assert cli["n_workloads"] == g.workloads == (4 if window == "24h" else 0)
    assert cli["lower_flops"] == pytest.approx(g.lower_flops, rel=1e-9)
    assert cli["upper_flops"] == pytest.approx(g.upper_flops, rel=1e-9)
    assert cli["unattributed_net_energy_j"] == pytest.approx(g.outside_net_energy_j, rel=1e-9)
    # the time outside rows the sensor did not see, read from the start row alike (round 12, `outside-blind`)
    assert (
        len(g.notes) == 1
        and "unseen by sim (blind share 75%)" in g.notes[0]
        and cli["notes"] == list(g.notes)
    )
    reg = mon.metrics.registry
    assert reg.get_sample_value("flopwatch_window_verdict", {"flopwatch_window_verdict": g.verdict}) == 1.0
    if window != "24h":  # the last 150 s hold only the bursts: no row, energy outside workloads only
        assert (
            g.lower_flops == 0
            and 0 < g.outside_net_energy_j < res.totals[f"sim:{DEVICE}"]["outside_net_energy_j"]
        )
        return
    assert g.lower_flops <= truth <= g.upper_flops  # sound over the whole job
    if k in (0.3, 0.8):  # neither the chunks nor the bursts make the job "below"
        assert g.verdict != "below" and "below" not in [w["verdict"] for w in res.workloads]


def test_the_gauge_spans_a_restart_as_the_command_does(tmp_path, capsys, profile_path, family):  # noqa: ANN001
    """Two sessions on one ledger (the second 1000 s later): the restarted daemon's gauge, over a window that
    reaches into the first session, starts from the first session's rows and checkpoint marks, as the command."""
    sched = _split_and_bursts(family[0])
    _monitor(tmp_path, profile_path, sched, threshold=1e17, duration=400.0, window_s=1000.0)
    mon, res, _ = _monitor(tmp_path, profile_path, _one_job(family[0]), threshold=1e17, window_s=1000.0,
                           wall0=1.7e9 + 1000.0)  # fmt: skip
    g = mon.window_verdict
    # the window (1000 s back from the end, 1130 s) starts at 130 s: inside the 4th chunk (125–140 s)
    cli = _cli_verdict(capsys, tmp_path / "ledger.db", 1e17, profile_path, "1000s")
    assert len(res.workloads) == 1 and g.workloads == cli["n_workloads"] == 2  # the 4th chunk + the job
    assert (
        0 < g.outside_net_energy_j < res.totals[f"sim:{DEVICE}"]["outside_net_energy_j"]
    )  # a baseline applied
    assert (cli["verdict"], cli["lower_flops"]) == (g.verdict, pytest.approx(g.lower_flops, rel=1e-9))
    assert cli["upper_flops"] == pytest.approx(g.upper_flops, rel=1e-9)
    assert cli["unattributed_net_energy_j"] == pytest.approx(g.outside_net_energy_j, rel=1e-9)


def test_an_fp16_job_under_an_fp32_orin_profile_is_never_below(tmp_path):  # noqa: ANN001
    """The Jetson attack through the daemon (SIMULATED Orin Nano; its profile records no power limit): an
    fp16 run of an fp32-calibrated configuration does ~6 × the FLOPs per joule; its row is out of regime on
    bytes per joule and net power, and "uncertain" at T = 0.8 × truth although its point estimate is ~1/6 of
    the truth."""
    from flopwatch.estimate.profile import Profile
    from flopwatch.redteam.simulated import orin_family, sim_profile

    fam = orin_family(quick=True)
    prof = sim_profile("orin-nano", fam, "fp32", exclude=fam[3].label)
    job = dataclasses.replace(fam[3], dtype="fp16", label="fp16-job")
    sched = [Idle(30.0), Run(job, duration_s=60.0), Idle(40.0)]
    (s,) = from_spec("orin-nano", seed=2, schedule=sched)
    truth = sum(r.total_flops for r in s.accelerator.runs)
    cfg = MonitorConfig(
        sensors=["sim:orin-nano"], ledger=tmp_path / "l.db", threshold_flops=0.8 * truth, duration_s=130.0
    )
    prof_path = prof.save(tmp_path / "orin.json")
    (row,) = Monitor(cfg, sensors=[s], profile=Profile.load(prof_path)).run().workloads
    assert row["estimate_flops"] < 0.3 * truth  # the evasion fools the point estimate
    assert row["verdict"] == "uncertain" and row["regime"] == "out-of-regime"
    text = row["assumptions"]  # the estimate's broken assumptions, said; the sound bound decides
    assert "bytes_per_j" in text and "net_power_w" in text
    assert row["upper_flops"] is None or row["upper_flops"] >= truth
