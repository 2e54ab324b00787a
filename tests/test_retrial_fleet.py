"""The newcomer retrial's fleet defects (issue 24): the tour's simulated fleet gets a built-in energy estimate near
its ground truth (not 0), JSON says why where there is none, fleet options answer in estimate's one wording, and a
cohort's key says what its times are."""

from __future__ import annotations

import re

import numpy as np
import pytest

from flopwatch.cli import main
from prom_helpers import LocalPrometheus, backfill, find_tool

needs_prometheus = pytest.mark.skipif(
    find_tool("promtool") is None or find_tool("prometheus") is None,
    reason="needs promtool and prometheus (Debian package 'prometheus')",
)
WALL = 1_700_000_000.0


def _steady(name: str) -> tuple[float, float, float]:
    """(mean power W, utilisation, FLOP/s) of the simulator's H100 running a catalogue workload."""
    from flopwatch.sim.accelerator import SimulatedAccelerator
    from flopwatch.sim.dcgm import CATALOG

    acc = SimulatedAccelerator("h100", seed=0)
    p = acc.run(CATALOG[name], duration_s=600).point
    return p.power_w, p.util, p.achieved_flops_per_s


def test_a_host_bound_jobs_power_inverts_through_its_utilisation():
    """The cause of defect 3: the forward model scales a host-bound job's dynamic power by util/util_min, the
    inverse ignored it, so the tour's small-bf16 job (17 % busy, 159 W) sat under every line and gave 0."""
    from flopwatch.powermodel.device_power import power_model_for

    pm = power_model_for("h100")
    p, u, rate = _steady("small-bf16")
    assert u < 0.3 and pm.flop_rate("bf16", np.array([p]))[0][0] == 0.0  # without the utilisation: 0
    mid, lo, hi = (x[0] for x in pm.flop_rate("bf16", np.array([p]), util=np.array([u])))
    assert lo <= rate <= hi and 0.5 * rate < mid < 1.5 * rate, (mid / rate, lo, hi)
    # a span that mixes idle time in (a cohort over whole windows): the same work over the longer span
    k = 2 / 3
    mixed = pm.flop_rate("bf16", np.array([pm.idle_w + k * (p - pm.idle_w)]), util=np.array([k * u]))[0][0]
    assert mixed / k == pytest.approx(mid, rel=1e-9)
    # an idle GPU (utilisation under the 5 % gate) with a little power noise: no work invented
    assert pm.flop_rate("bf16", np.array([pm.idle_w + 3.0]), util=np.array([0.01]))[0][0] == 0.0
    # a compute-bound job (busy all the time) is unchanged by the utilisation
    p7, u7, _ = _steady("llm-7b-bf16")
    assert pm.flop_rate("bf16", np.array([p7]), util=np.array([u7]))[0][0] == pytest.approx(
        pm.flop_rate("bf16", np.array([p7]))[0][0]
    )


@pytest.fixture(scope="module")
def tour(tmp_path_factory):
    """The README's fleet tour: ``sim openmetrics --gpus 8 --hours 2`` (seed 0), backfilled, served on loopback."""
    from flopwatch.sim.dcgm import SimulatedFleet, random_schedule

    d = tmp_path_factory.mktemp("tour")
    fleet = SimulatedFleet(8, 2.0, random_schedule(8, 2.0, seed=0), device="h100", wall0=WALL, seed=0)
    truth = fleet.write_openmetrics(d / "fleet.om")
    backfill(d / "fleet.om", d / "tsdb")
    with LocalPrometheus(d / "tsdb") as p:
        yield p, truth


def _estimate(url: str, by: str) -> dict:
    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet

    plan = ReadPlan(WALL, WALL + 7200, window_s=3600)  # the CLI's default window
    res = estimate_fleet(PrometheusClient(url), plan, by=by, threshold=1e18, verifier_operated=True)
    return {g["key"]: g for g in [*res.groups, res.fleet]}


@needs_prometheus
def test_the_tours_fleet_gets_an_energy_estimate_near_its_truth(tour):
    p, truth = tour
    ((pod, t),) = truth.pods.items()
    by_pod = _estimate(p.url, "pod")
    g = by_pod[pod]
    assert 0.5 * t["flops"] < g["estimate_flops"] < 1.5 * t["flops"], g["estimate_flops"] / t["flops"]
    assert g["estimate_lower_flops"] <= t["flops"] <= g["estimate_upper_flops"]
    assert g["estimate_reason"] is None
    # the GPUs' time outside the pod is idle: 0 FLOPs, and the JSON says why
    idle = by_pod["(no pod)"]
    assert idle["estimate_flops"] == 0.0 and idle["estimate_reason"].startswith("idle")
    # every group: a positive estimate, or a reason beside a 0 / null (never a bare 0.0 the text calls "—")
    for row in by_pod.values():
        assert row["estimate_flops"] is not None and row["estimate_flops"] > 0 or row["estimate_reason"]
    # by cohort the GPUs' whole windows (idle minutes included) are one group: the same estimate
    by_cohort = _estimate(p.url, "cohort")
    ((key, c),) = ((k, v) for k, v in by_cohort.items() if not k.startswith("("))
    assert c["estimate_flops"] == pytest.approx(g["estimate_flops"], rel=0.05)
    # the key names the busy windows' edges, and the group's first and last samples lie within them
    m = re.fullmatch(r"busy 1 h windows (\S+)Z→(\S+)Z", key)
    assert m, key
    assert m.group(1) <= c["start"][:16] and c["end"][:16] <= m.group(2)


def test_text_says_why_a_group_has_no_estimate(capsys):
    from flopwatch.cli.fleet_cmds import _print_table

    row = {"gpus": 8, "gpu_hours": 1.0, "coverage": 1.0, "energy_j": 1e6, "net_energy_j": 0.0,
           "lower_flops": 0.0, "upper_flops": 1e15, "pipe_estimate_flops": None, "verdict": "uncertain", "notes": []}  # fmt: skip
    groups = [
        row
        | {"key": "a", "estimate_flops": None, "estimate_reason": "the built-in model gives 0 at this power"},
        row | {"key": "b", "estimate_flops": 0.0, "estimate_reason": "idle: mean utilisation <= 5%"},
    ]
    d = {"prometheus": "http://p:9090", "by": "pod", "start": "s", "end": "e", "threshold_flops": 1e18,
         "groups": groups, "fleet": row | {"key": "(all GPUs)", "estimate_flops": 2e17, "estimate_reason": None},
         "energy_model": "built-in", "metrics_missing": [], "gpu_hours": 1.0, "elapsed_s": 1.0, "cpu_s": 0.5,
         "queries": 1, "bytes_received": 1e3, "jobs_from": "labels", "gpus_per_chunk": 8, "windows_per_chunk": 2}  # fmt: skip
    _print_table(d, width=200)
    out = capsys.readouterr().out
    assert "estimate — (the built-in model gives 0 at this power)" in out
    assert "estimate 0 (idle: mean utilisation <= 5%)" in out
    assert "estimate 2.000e17;" in out


def _error(capsys, args: list[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    return err


@pytest.mark.parametrize("bad", ["nan", "1.2e1x", "-1", "0", "inf"])
def test_fleet_threshold_answers_in_estimates_wording(tmp_path, capsys, bad):
    prom = ["fleet", "estimate", "--prometheus", "http://127.0.0.1:9", "--start", "0", "--end", "7200"]
    fleet = _error(capsys, [*prom, "--threshold", bad])
    est = _error(capsys, ["estimate", str(tmp_path / "r.jsonl"), "--profile", str(tmp_path / "p.json"),
                          "--threshold", bad])  # fmt: skip
    assert fleet.startswith("flopwatch: error: option '--threshold': ")
    assert fleet == est


def test_fleet_help_gives_threshold_the_same_metavar_as_estimate(capsys):
    def metavar(args: list[str]) -> str:
        try:
            assert main([*args, "--help"]) in (0, None)
        except SystemExit as e:
            assert e.code in (0, None)
        m = re.search(r"--threshold\s+(<\w+>|[A-Z]+)", capsys.readouterr().out)
        assert m
        return m.group(1)

    assert metavar(["fleet", "estimate"]) == metavar(["estimate"])


def test_fleet_range_and_sim_errors_name_the_option(tmp_path, capsys):
    prom = ["fleet", "estimate", "--prometheus", "http://127.0.0.1:9"]
    assert "option '--step': step 15 s is too coarse" in _error(
        capsys, [*prom, "--start", "0", "--end", "10"]
    )
    assert "option '--start'" in _error(capsys, [*prom, "--start", "x", "--end", "10"])
    err = _error(capsys, [*prom, "--start", "0", "--end", "7200", "--window", "1s"])
    assert "option '--window'" in err
    err = _error(capsys, ["sim", "openmetrics", "-o", str(tmp_path / "f.om"), "--interval", "0s"])
    assert "option '--interval'" in err and not (tmp_path / "f.om").exists()
