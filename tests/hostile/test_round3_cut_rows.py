"""Round 3, finding 3: a row cut before its workload ended is never "below" (SIMULATED H100, virtual clock).

A cleanly stopped daemon (SIGTERM, i.e. ``systemctl stop``, or ``--duration`` ending) closed the open workload
as "interrupted" with no warning, so its partial FLOPs — a lower bound — could be judged "below" a threshold
the whole workload crosses; `flopwatch verdict` and the window gauge agreed (issue 25). Every number here is
simulated by flopwatch.sim (seeded), not measured.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from flopwatch.cli import main
from flopwatch.monitor import Monitor, MonitorConfig
from flopwatch.monitor.accounting import CUT_WARNING_PREFIX
from flopwatch.sim.accelerator import Idle, Run
from flopwatch.sim.sensor import from_spec
from monitor_helpers import private_tmp  # noqa: F401 - autouse: temporary files under tmp_path

DEVICE = "h100"


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory) -> Path:  # noqa: ANN001
    from flopwatch.redteam.simulated import datacenter_family, sim_profile

    family = datacenter_family("bf16", quick=True)
    prof = sim_profile(DEVICE, family, "bf16", exclude=family[0].label)
    return prof.save(tmp_path_factory.mktemp("prof") / "h100-bf16.json")


def _run(
    tmp_path: Path, profile_path: Path, *, duration: float, stop_at: float | None = None
) -> tuple[Monitor, Any]:
    from flopwatch.estimate.profile import Profile
    from flopwatch.redteam.simulated import datacenter_family

    job = datacenter_family("bf16", quick=True)[0]
    sensors = from_spec(DEVICE, seed=2, schedule=[Idle(20.0), Run(job, duration_s=300.0), Idle(30.0)])
    # A threshold far above what the first minutes of the job can reach, far below the whole job: a decisive
    # "below" on the cut row would clear a job that crosses it.
    truth = sum(r.total_flops for r in sensors[0].accelerator.runs)
    cfg = MonitorConfig(
        sensors=[f"sim:{DEVICE}"],
        ledger=tmp_path / "ledger.db",
        threshold_flops=0.6 * truth,
        duration_s=duration,
    )
    mon = Monitor(cfg, sensors=sensors, profile=Profile.load(profile_path))
    if stop_at is not None:
        # SIGTERM's handler calls Monitor.stop; on a virtual clock, stop from the sink once sensor time passes.
        sink = mon._sink

        def stopping_sink(item: Any) -> None:
            sink(item)
            if item.t_s >= stop_at and not mon._stop.is_set():
                mon.stop("SIGTERM")

        mon._sink = stopping_sink  # type: ignore[method-assign]
    return mon, mon.run(install_signals=False)


def _check_cut(
    mon: Monitor, res: Any, tmp_path: Path, profile_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (row,) = res.workloads
    assert row["status"] == "interrupted"
    assert any(w.startswith(CUT_WARNING_PREFIX) for w in row["warnings"]), row["warnings"]
    assert row["verdict"] in ("uncertain", "above"), row["verdict"]
    # the gauge (the window verdict over the ledger's rows)
    assert mon.window_verdict is not None and mon.window_verdict.verdict != "below"
    # `flopwatch verdict` over the ledger, as recorded and re-assessed with the profile
    thr = f"{mon.config.threshold_flops:g}"
    for extra in ([], ["--profile", str(profile_path)]):
        capsys.readouterr()
        assert main(["verdict", str(tmp_path / "ledger.db"), "--threshold", thr, "--json", *extra]) == 0
        out = json.loads(capsys.readouterr().out)
        verdicts = [g["verdict"] for g in out["groups"]]
        assert verdicts and "below" not in verdicts, out


def test_duration_ending_mid_workload_is_not_below(tmp_path: Path, profile_path: Path, capsys) -> None:  # noqa: ANN001
    mon, res = _run(tmp_path, profile_path, duration=80.0)
    _check_cut(mon, res, tmp_path, profile_path, capsys)


def test_sigterm_mid_workload_is_not_below(tmp_path: Path, profile_path: Path, capsys) -> None:  # noqa: ANN001
    mon, res = _run(tmp_path, profile_path, duration=1000.0, stop_at=80.0)
    assert res.end_reason == "SIGTERM"
    _check_cut(mon, res, tmp_path, profile_path, capsys)


def test_a_complete_workload_carries_no_cut_warning(tmp_path: Path, profile_path: Path) -> None:
    mon, res = _run(tmp_path, profile_path, duration=400.0)
    (row,) = res.workloads
    assert row["status"] == "complete"
    assert not any(w.startswith(CUT_WARNING_PREFIX) for w in row["warnings"])


def test_a_crash_mid_workload_is_recovered_as_a_cut_row(tmp_path: Path, profile_path: Path) -> None:
    """The process dies (no stop row, as after kill -9) 80 s into the job; the next start recovers the running row
    from the last checkpoint with the same named warning."""
    from flopwatch.estimate.profile import Profile

    class Crash(BaseException):
        pass

    from flopwatch.redteam.simulated import datacenter_family

    job = datacenter_family("bf16", quick=True)[0]
    sensors = from_spec(DEVICE, seed=2, schedule=[Idle(20.0), Run(job, duration_s=300.0), Idle(30.0)])
    cfg = MonitorConfig(
        sensors=[f"sim:{DEVICE}"], ledger=tmp_path / "ledger.db", threshold_flops=1e30, duration_s=1000.0,
        checkpoint_s=10.0,
    )  # fmt: skip
    mon = Monitor(cfg, sensors=sensors, profile=Profile.load(profile_path))
    sink = mon._sink

    def crashing_sink(item: Any) -> None:
        sink(item)
        if item.t_s >= 80.0:
            raise Crash

    mon._sink = crashing_sink  # type: ignore[method-assign]
    with pytest.raises(Crash):
        mon.run(install_signals=False)
    again = Monitor(
        dataclasses.replace(cfg, duration_s=5.0),
        sensors=from_spec(DEVICE, seed=2, schedule=[Idle(10.0)]),
        profile=Profile.load(profile_path),
    )
    again.run(install_signals=False)
    from flopwatch.monitor.ledger import read_entries

    (row,) = [e.payload for e in read_entries(tmp_path / "ledger.db") if e.kind == "workload"]
    assert row["status"] == "interrupted" and row["verdict"] != "below"
    assert any(w.startswith(CUT_WARNING_PREFIX) for w in row["warnings"]), row["warnings"]
