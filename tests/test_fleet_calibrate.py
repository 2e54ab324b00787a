"""Per-model calibration from pipe counters (fleet/calibrate.py): simulated fleets where some GPUs export the DCGM
profiling fields and some do not, backfilled into a real Prometheus on loopback; and the rule on rows alone."""

from __future__ import annotations

import pytest

from flopwatch.fleet import calibrate as C
from flopwatch.telemetry import dcgm_metrics as M
from prom_helpers import LocalPrometheus, backfill, find_tool

DAY = 86400.0
WALL = (
    1_700_000_000.0  # day 0: honest; day 1: too few calibration jobs; day 2: counters only on idle-ish jobs
)
HOURS = 3.0
WINDOW_S = 1800.0
PROFILING = [m.name for m in M.TABLE if m.profiling]
LLM = ("llm-7b-bf16", "llm-1b-bf16")

needs_prometheus = pytest.mark.skipif(
    find_tool("promtool") is None or find_tool("prometheus") is None,
    reason="needs promtool and prometheus (Debian package 'prometheus')",
)


def _jobs(prefix: str, n: int, workloads: tuple[str, ...]) -> list:
    """One 1-GPU job per GPU; start and end windows differ between jobs (independent jobs)."""
    from flopwatch.sim.dcgm import CATALOG, FleetJob

    return [
        FleetJob(f"{prefix}{i}", "research", 1, 60 + 1500 * (i % 4), 2400 + 450 * i,
                 CATALOG[workloads[i % len(workloads)]])
        for i in range(n)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    """Per day, GPUs with profiling fields (``cal-*``) and H100s without (``dark-*``); day 0 adds two A100s
    without counters (a model with no calibration source)."""
    from flopwatch.sim.dcgm import SimulatedFleet

    d = tmp_path_factory.mktemp("fleetcal")
    fleets = {
        "cal0": SimulatedFleet(8, HOURS, _jobs("cal-", 8, LLM), wall0=WALL, seed=11),
        "dark0": SimulatedFleet(6, HOURS, _jobs("dark-", 6, LLM), wall0=WALL, seed=12, omit=PROFILING),
        "a100": SimulatedFleet(2, HOURS, _jobs("amp-", 2, LLM), device="a100", wall0=WALL, seed=13, omit=PROFILING),
        "cal1": SimulatedFleet(2, HOURS, _jobs("cal-", 2, LLM), wall0=WALL + DAY, seed=21),
        "dark1": SimulatedFleet(4, HOURS, _jobs("dark-", 4, LLM), wall0=WALL + DAY, seed=22, omit=PROFILING),
        # hostile: counters only where the work is tiny (1,024-token steps of a 20M model: ≈ 90 W above idle)
        "cal2": SimulatedFleet(8, HOURS, _jobs("cal-", 8, ("small-bf16",)), wall0=WALL + 2 * DAY, seed=31),
        "dark2": SimulatedFleet(6, HOURS, _jobs("dark-", 6, LLM), wall0=WALL + 2 * DAY, seed=32, omit=PROFILING),
    }  # fmt: skip
    truth = {}
    for k, f in fleets.items():
        om = d / f"{k}.om"
        truth[k] = f.write_openmetrics(om).pods
        backfill(om, d / "tsdb")
    with LocalPrometheus(d / "tsdb") as p:
        yield p, truth


def _run(url: str, day: int, **kw):
    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet

    w0 = WALL + day * DAY
    plan = ReadPlan(w0, w0 + HOURS * 3600, window_s=WINDOW_S)
    res = estimate_fleet(PrometheusClient(url), plan, by="pod", **kw)
    return res, {g["key"]: g for g in res.groups}


def _without_calibration(row: dict) -> dict:
    """The row as it is without calibration: no ``calibrated_*`` keys, no calibration notes."""
    out = {k: v for k, v in row.items() if not k.startswith("calibrated_")}
    out["notes"] = [n for n in row["notes"] if not ("calibrated estimate" in n and "profile" not in n)]
    return out


@needs_prometheus
def test_counterless_groups_get_a_labelled_calibrated_estimate_near_the_truth(prom):
    p, truth = prom
    res, by = _run(p.url, 0, threshold=1e20)
    cal = res.meta["pipe_calibration"]["h100"]
    assert cal["jobs"] == 8 and cal["gpu_jobs"] == 8 and sorted(cal["groups"]) == sorted(truth["cal0"])
    for key, t in truth["dark0"].items():
        g = by[key]
        assert g["pipe_estimate_flops"] is None
        # the pipes count issued tensor cycles, 5–15 % above useful FLOPs (sim/dcgm.py): so is η; tolerance 12 %
        assert t["flops"] * 0.97 <= g["calibrated_flops"] <= t["flops"] * 1.12, key
        assert g["calibrated_lower_flops"] <= t["flops"] <= g["calibrated_upper_flops"], key
        assert (
            "calibrated from 8 GPU-jobs (8 independent jobs) with pipe counters of model h100"
            in g["calibrated_from"]
        )
        (note,) = [n for n in g["notes"] if n.startswith("calibrated estimate ")]
        assert "η = " in note and "not physics" in note and "never enters the verdict" in note
        assert not any("extrapolated" in n for n in g["notes"]), key
        assert g["verdict"] == "uncertain"  # profiling counters missing: a named note, never "below"
    for key in truth["cal0"]:  # the sources keep their own pipe estimate, no calibrated one
        assert by[key]["calibrated_flops"] is None and by[key]["pipe_estimate_flops"] > 0
    # a model with no source of its own is never calibrated from another model's GPUs
    assert res.meta["pipe_calibration"]["a100"]["refused"].startswith("0 independent job(s) of model a100")
    for key in truth["a100"]:
        assert by[key]["calibrated_flops"] is None
        assert any(
            n.startswith("no calibrated estimate from pipe counters: 0 independent") for n in by[key]["notes"]
        )


@needs_prometheus
@pytest.mark.parametrize("day", [0, 2])
def test_verdicts_and_bounds_are_the_same_with_and_without_calibration(prom, day):
    p, _ = prom
    for threshold in (1e16, 1e18, 1e20):
        on, by_on = _run(p.url, day, threshold=threshold)
        off, by_off = _run(p.url, day, threshold=threshold, pipe_calibration=False)
        assert off.meta["pipe_calibration"] is None and "calibrated_flops" not in off.groups[0]
        assert by_on.keys() == by_off.keys()
        for k in by_on:
            assert _without_calibration(by_on[k]) == by_off[k], k
        assert _without_calibration(on.fleet) == off.fleet
        # a calibrated interval wholly under the threshold never makes a "below" the sound bound does not make
        for g in by_on.values():
            if g["calibrated_upper_flops"] is not None and g["calibrated_upper_flops"] < threshold:
                assert g["verdict"] != "below" or g["upper_flops"] < threshold


@needs_prometheus
def test_too_few_calibration_jobs_calibrate_nothing_and_say_why(prom):
    p, truth = prom
    res, by = _run(p.url, 1)
    why = res.meta["pipe_calibration"]["h100"]["refused"]
    assert why.startswith("2 independent job(s) of model h100 with trusted pipe counters, 3 needed")
    for key in truth["dark1"]:
        assert by[key]["calibrated_flops"] is None
        assert f"no calibrated estimate from pipe counters: {why}" in by[key]["notes"]


@needs_prometheus
def test_counters_only_on_idle_ish_jobs_bias_low_are_named_and_change_no_verdict(prom):
    p, truth = prom
    res, by = _run(p.url, 2, threshold=5e17)
    assert res.meta["pipe_calibration"]["h100"]["jobs"] == 8
    for key, t in truth["dark2"].items():
        g = by[key]
        # what the operator gains: the calibrated answer is far under the truth (and under the threshold) …
        assert g["calibrated_upper_flops"] < 0.2 * t["flops"] and t["flops"] > 5e17
        # … but the group says what it rests on, that it is an extrapolation, and the verdict is not "below"
        assert any("extrapolated" in n and "W per GPU above idle" in n for n in g["notes"]), key
        assert g["verdict"] == "uncertain" and g["upper_flops"] >= t["flops"]


def _row(key, start, end, pipe, energy=1e6, *, device="h100", notes=(), gpus=1):
    return {
        "key": key,
        "start": start,
        "end": end,
        "devices": [device],
        "pipe_estimate_flops": pipe,
        "net_energy_j": energy,
        "gpu_hours": 1.0 * gpus,
        "gpus": gpus,
        "notes": ["no calibration profile: no calibrated estimate", *notes],
    }


def test_sources_are_independent_unflagged_and_physical():
    """Rows alone: pods of one job count once, flagged or impossible groups never calibrate, one odd job is
    outvoted by the median, and the spread widens the interval."""
    h = "2023-11-14T{:02d}:00:00Z".format
    rows = [
        _row("a-0", h(0), h(2), 4e17),  # job a split into two pods: one independent job
        _row("a-1", h(0), h(2), 4e17),
        _row("b", h(1), h(3), 5e17),
        _row("flagged", h(2), h(4), 9e17, notes=("energy counter reset 1 time(s)",)),
        _row("physics", h(3), h(5), 1e22),  # η above the device's best FLOP per joule
        _row("dark", h(0), h(3), None, 2e6),
    ]
    cal = C.calibrate(rows, 3600.0)
    assert cal["h100"]["refused"].startswith("2 independent job(s)")
    rows.append(_row("c", h(4), h(6), 4.4e17))
    rows.append(_row("odd", h(5), h(7), 0.5e17))  # an fp32 job: one vote, not the answer
    cal = C.calibrate(rows, 3600.0)["h100"]
    assert (cal["jobs"], cal["gpu_jobs"]) == (4, 5) and not {"flagged", "physics"} & set(cal["groups"])
    assert cal["eta"] == pytest.approx(4.2e11) and (cal["eta_min"], cal["eta_max"]) == (5e10, 5e11)
    C.apply(rows, {"h100": cal})
    dark = rows[5]
    assert dark["calibrated_flops"] == pytest.approx(8.4e17)
    assert dark["calibrated_lower_flops"] == pytest.approx(2e6 * 5e10 * 0.7)
    assert dark["calibrated_upper_flops"] == pytest.approx(2e6 * 5e11 * 1.05)
    assert all(r["calibrated_flops"] is None for r in rows if r is not dark)
    assert C.calibrate(rows, 3600.0, min_jobs=5)["h100"]["refused"].startswith("4 independent job(s)")


@needs_prometheus
def test_cli_json_table_note_and_off_switch(prom, capsys):
    import json

    from flopwatch.cli import main

    p, _ = prom
    base = ["fleet", "estimate", "--prometheus", p.url, "--start", str(WALL), "--end", str(WALL + HOURS * 3600),
            "--window", "30m", "--threshold", "1e18"]  # fmt: skip
    assert main([*base, "--json"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert on["pipe_calibration"]["h100"]["jobs"] == 8
    assert on["groups"][-1]["key"] == "dark-5" and on["groups"][-1]["calibrated_flops"] > 0
    assert main([*base, "--json", "--no-pipe-calibration"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert off["pipe_calibration"] is None and "calibrated_flops" not in off["groups"][-1]
    assert [g["verdict"] for g in off["groups"]] == [g["verdict"] for g in on["groups"]]
    assert main([*base, "--no-progress"]) == 0
    # the groups' notes, their wrapped lines joined back: the label is in the text output
    notes = " ".join(x.strip() for x in capsys.readouterr().out.splitlines())
    assert "calibrated from 8 GPU-jobs (8 independent jobs) with pipe counters of model h100" in notes
