"""Fleet estimates against a real Prometheus: simulated fleets backfilled with promtool, served on loopback."""

from __future__ import annotations

import json
import math

import pytest

from flopwatch.fleet.localprom import LocalPrometheus, backfill, find_tool

pytestmark = pytest.mark.skipif(
    find_tool("promtool") is None or find_tool("prometheus") is None,
    reason="needs promtool and prometheus (Debian package 'prometheus')",
)

DAY = 86400.0
WALL_A = 1_700_000_000.0  # fleet A: pods, every metric, one counter reset per GPU, 2 % scrapes missing
WALL_B = WALL_A + DAY  # fleet B: exported_ labels, no energy counter, no pipe metrics, no SM clock
WALL_C = WALL_A + 2 * DAY  # fleet C: HPC job labels

JOBS_A = [
    {
        "name": "train-7b",
        "namespace": "research",
        "gpus": 8,
        "start_h": 0.2,
        "hours": 1.6,
        "workload": "llm-7b-bf16",
    },
    {"name": "vit", "namespace": "prod", "gpus": 2, "start_h": 0.1, "hours": 1.2, "workload": "vit-fp32"},
    {
        "name": "small",
        "namespace": "research",
        "gpus": 2,
        "start_h": 0.3,
        "hours": 0.9,
        "workload": "small-bf16",
    },
]


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    from flopwatch.sim.dcgm import SimulatedFleet, load_fleet_schedule, random_schedule

    d = tmp_path_factory.mktemp("fleet")
    sched = d / "jobs.json"
    sched.write_text(json.dumps({"jobs": JOBS_A}))
    fleets = {
        "A": SimulatedFleet(
            12,
            2.0,
            load_fleet_schedule(sched),
            device="h100",
            gpus_per_node=4,
            wall0=WALL_A,
            seed=1,
            resets=1,
            drop=0.02,
        ),
        "B": SimulatedFleet(
            4,
            2.0,
            random_schedule(4, 2.0, gpus_per_node=4, seed=2),
            device="a100",
            gpus_per_node=4,
            wall0=WALL_B,
            seed=2,
            label_style="exported",
            omit=[
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
                "DCGM_FI_DEV_SM_CLOCK",
            ],
        ),
        "C": SimulatedFleet(
            4,
            2.0,
            random_schedule(4, 2.0, gpus_per_node=4, seed=3),
            device="h200",
            gpus_per_node=4,
            wall0=WALL_C,
            seed=3,
            label_style="hpc",
        ),
    }
    import time

    live0 = float(int(time.time()) - 1200)  # fleet L ends about now: what a live instant query sees
    fleets["L"] = SimulatedFleet(
        2,
        1200 / 3600,
        random_schedule(2, 1200 / 3600, gpus_per_node=2, seed=4),
        device="h100",
        gpus_per_node=2,
        wall0=live0,
        seed=4,
    )
    truth = {}
    tsdb = d / "tsdb"
    for k, f in fleets.items():
        om = d / f"{k}.om"
        truth[k] = f.write_openmetrics(om)
        backfill(om, tsdb)
    with LocalPrometheus(tsdb) as p:
        yield p, truth


def _run(url, wall0, by="pod", hours=2.0, extra=()):
    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet

    kw = dict(extra)
    plan = ReadPlan(wall0, wall0 + hours * 3600, window_s=1800, **kw.pop("plan_kw", {}))
    return estimate_fleet(PrometheusClient(url), plan, by=by, **kw)


def test_energy_per_pod_within_one_percent(prom):
    p, truth = prom
    res = _run(p.url, WALL_A)
    pods = truth["A"].pods
    assert {g["key"] for g in res.groups} == set(pods)
    for g in res.groups:
        t = pods[g["key"]]
        assert g["gpus"] == t["gpus"]
        assert g["energy_j"] == pytest.approx(t["energy_j"], rel=0.01), g["key"]
        assert g["net_energy_j"] == pytest.approx(t["net_energy_j"], rel=0.02), g["key"]
        assert 0.95 < g["coverage"] <= 1.0
    # one counter reset per GPU at a random scrape: most fall inside a pod, whose energy still holds
    assert sum(g["counter_resets"] for g in res.groups) >= 3


def test_resets_on_demand_match_the_full_query(prom):
    """resets() is asked only where a window's counter maximum exceeds its last value; every window with counter
    samples must still carry exactly the server's resets() count (fleet A: one reset per GPU)."""
    import numpy as np

    from flopwatch.fleet import PrometheusClient, ReadPlan
    from flopwatch.fleet.reader import FleetReader, _assemble, _key, _ms_range
    from flopwatch.telemetry import dcgm_metrics as M

    p, _ = prom
    client = PrometheusClient(p.url)
    reader = FleetReader(client, ReadPlan(WALL_A, WALL_A + 2 * 3600, window_s=1800, gpus_per_chunk=4))
    present, keys, label = reader.discover()
    W = _ms_range(1800, client.version() < (3, 0))
    n_blocks = n_reset_windows = 0
    for matchers in reader.chunks(keys, label):
        for block in reader.blocks(matchers):
            n_blocks += 1
            full = client.query_range(f"resets({M.ENERGY}{{{matchers}}}[{W}])", block.t[0], block.t[-1], 1800)
            ref = _assemble({"r": full}, block.t[0], block.t[-1], 1800, present)
            rows = {_key(lab): i for i, lab in enumerate(ref.labels)}
            got = block.values["e_resets"]
            for i, lab in enumerate(block.labels):
                has = block.values["e_n"][i] > 0
                want = ref.values["r"][rows[_key(lab)]]
                assert np.array_equal(got[i][has], want[has]), lab
                n_reset_windows += int(np.sum(want[has] > 0))
    assert n_reset_windows >= 3  # the on-demand path ran and found the resets
    assert 0 < reader.n_lazy_queries <= n_blocks


def test_both_estimates_against_ground_truth(prom):
    p, truth = prom
    res = _run(p.url, WALL_A, extra={"threshold": 1e18})
    for g in res.groups:
        t = truth["A"].pods[g["key"]]
        # pipe activity counts issued tensor cycles: above the useful FLOPs by the simulated waste (5–15 %)
        assert t["flops"] * 0.97 <= g["pipe_estimate_flops"] <= t["flops"] * 1.16, g["key"]
        assert g["pipe_lower_flops"] <= t["flops"] <= g["pipe_upper_flops"]
        # the built-in (uncalibrated) energy model: its bounds must hold the truth
        assert g["lower_flops"] <= t["flops"] <= g["upper_flops"], g["key"]
        assert g["verdict"] in ("above", "below", "uncertain")
        if g["lower_flops"] > 1e18:
            assert g["verdict"] == "above"
    assert res.meta["simulated"] is True
    assert "built-in" in res.meta["energy_model"]


def test_by_namespace_sums_pods(prom):
    p, truth = prom
    res = _run(p.url, WALL_A, by="namespace")
    pods = truth["A"].pods
    want = {}
    for t in pods.values():
        want[t["namespace"]] = want.get(t["namespace"], 0.0) + t["energy_j"]
    got = {g["key"]: g["energy_j"] for g in res.groups}
    assert set(got) == set(want)
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=0.01)


def test_selector_and_gpu_grouping(prom):
    p, truth = prom
    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet

    res = estimate_fleet(
        PrometheusClient(p.url),
        ReadPlan(WALL_A, WALL_A + 7200, window_s=1800, matchers='namespace="prod"'),
        by="pod",
    )
    assert [g["key"] for g in res.groups] == ["vit"]
    res = estimate_fleet(
        PrometheusClient(p.url), ReadPlan(WALL_A, WALL_A + 7200, window_s=1800, gpus_per_chunk=5), by="gpu"
    )
    assert len(res.groups) == 12  # every GPU, allocated or not; chunks of 5 GPUs
    assert res.meta["unattributed_series"] == 0


def test_missing_metrics_degrade_and_exported_labels(prom):
    p, truth = prom
    res = _run(p.url, WALL_B)
    pods = truth["B"].pods
    assert {g["key"] for g in res.groups} == set(pods)  # exported_pod wins over the exporter's own pod label
    for g in res.groups:
        t = pods[g["key"]]
        assert g["energy_j"] == pytest.approx(t["energy_j"], rel=0.01)  # from the power gauge alone
        assert g["energy_from_power_j"] == pytest.approx(g["energy_j"])
        assert g["pipe_estimate_flops"] is None
        assert any("TOTAL_ENERGY" in m for m in g["missing"])
        assert any("pipe" in m for m in g["missing"])
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in res.meta["metrics_missing"]


def test_hpc_job_label(prom):
    p, truth = prom
    res = _run(p.url, WALL_C, by="job")
    jobs = truth["C"].jobs
    assert {g["key"] for g in res.groups} == set(jobs)
    for g in res.groups:
        assert g["energy_j"] == pytest.approx(jobs[g["key"]]["energy_j"], rel=0.01)
        assert g["devices"] == ["h200"]
        assert not math.isnan(g["pipe_estimate_flops"])


def test_cli_json_contract_and_errors(prom, capsys):
    from flopwatch.cli import main

    p, _ = prom
    rc = main(
        [
            "fleet",
            "estimate",
            "--prometheus",
            p.url,
            "--start",
            "2023-11-14T22:13:20Z",
            "--end",
            str(WALL_A + 7200),
            "--window",
            "30m",
            "--threshold",
            "1e19",
            "--json",
        ]
    )
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    keys = {
        "key",
        "gpus",
        "start",
        "end",
        "energy_j",
        "net_energy_j",
        "estimate_flops",
        "lower_flops",
        "upper_flops",
        "pipe_estimate_flops",
        "verdict",
        "coverage",
        "missing",
    }
    assert d["groups"] and all(keys <= set(g) for g in d["groups"])
    rc = main(["fleet", "estimate", "--prometheus", p.url, "--start", "1600000000", "--end", "1600003600"])
    err = capsys.readouterr().err
    assert rc == 2 and "empty result" in err and err.count("\n") == 1
    rc = main(
        [
            "fleet",
            "estimate",
            "--prometheus",
            p.url,
            "--start",
            str(WALL_A),
            "--end",
            str(WALL_A + 7200),
            "--step",
            "10m",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "too coarse" in err


def test_sensor_reads_live(prom):
    from flopwatch.telemetry.sensors.discover import open_sensors

    p, _ = prom
    ss = open_sensors(f"prometheus:{p.url}?gpu=0")
    assert len(ss) == 1 and ss[0].info().kind == "prometheus" and ss[0].info().spec_key == "h100"
    r = ss[0].read()
    assert r.power_w is not None and r.power_w > 0 and r.energy_j is not None and r.sm_clock_mhz is not None


def test_sensor_plays_back_history(prom):
    from flopwatch.telemetry.sensors.base import VirtualClock
    from flopwatch.telemetry.sensors.discover import open_sensors

    p, _ = prom
    clock = VirtualClock(t0=WALL_A + 1800, wall0=WALL_A + 1800)
    ss = open_sensors(
        f'prometheus:{p.url}?match={{Hostname="node-0000"}}&start={WALL_A:.0f}&end={WALL_A + 3600:.0f}',
        clock=clock,
    )
    assert len(ss) == 4 and all(s.info().simulated for s in ss)
    r = ss[0].read()
    assert r.power_w is not None and r.power_w > 100  # node-0000 is busy at 30 min
    assert r.energy_j is not None and r.util is not None
    assert r.extra.get("tensor_util", 0) + r.extra.get("fp32_util", 0) > 0
    clock.advance(3600)
    from flopwatch.telemetry.sensors.replay import TraceEnded

    with pytest.raises(TraceEnded):
        ss[0].read()


def _sim_profile(path):
    """An eq2 profile calibrated on simulated H100 bf16 runs (their exact integrated energy), saved to ``path``."""
    import numpy as np

    from flopwatch.estimate import FrontierGate, calibrate
    from flopwatch.records import RecordSet, WorkloadRecord
    from flopwatch.sim.accelerator import SimulatedAccelerator
    from flopwatch.sim.sensor import RawWorkload

    acc = SimulatedAccelerator("h100", seed=5)
    rng = np.random.default_rng(0)
    recs = []
    for i in range(14):
        n, T = float(rng.uniform(3e8, 8e9)), float(rng.choice([2048, 4096, 8192]))
        acc.idle(30)
        r = acc.run(RawWorkload(f"w{i}", 6 * n * T, 25 * n, T, 8, "bf16", "gpt", 24, n), duration_s=600)
        recs.append(
            WorkloadRecord(
                label=r.label,
                net_energy_j=r.true_energy_j - acc.idle_power_w * r.duration_s,
                duration_s=r.duration_s,
                mean_util=r.point.util,
                total_flops=r.total_flops,
                dtype="bf16",
                idle_power_w=acc.idle_power_w,
                simulated=True,
            )
        )
    prof = calibrate(
        RecordSet(recs, idle_power_w=acc.idle_power_w), model="eq2", gate=FrontierGate(precision="bf16")
    )
    prof.save(path)
    return path


def test_calibrated_profile_energy_estimate(prom, tmp_path):
    from flopwatch.estimate import Profile

    p, truth = prom
    prof = Profile.load(_sim_profile(tmp_path / "h100_bf16.json"))
    res = _run(p.url, WALL_A, extra={"profile": prof, "threshold": 1e19})
    assert res.meta["energy_model"].startswith("profile")
    by = {g["key"]: g for g in res.groups}
    for pod in ("train-7b-0", "train-7b-1"):
        g, t = by[pod], truth["A"].pods[pod]
        assert g["lower_flops"] <= t["flops"] <= g["upper_flops"]
        assert g["estimate_flops"] == pytest.approx(t["flops"], rel=0.25)
    assert any("profile" in n and "fp32" in n for n in by["vit"]["notes"])  # a bf16 profile on an fp32 job
    # span resolution reads DRAM activity for the profile's TB term too, and gives the same estimates
    span = _run(p.url, WALL_A, extra={"profile": prof, "threshold": 1e19, "plan_kw": {"resolution": "span"}})
    for g in span.groups:
        h = by[g["key"]]
        assert g["estimate_flops"] == pytest.approx(h["estimate_flops"], rel=0.01), g["key"]
        assert g["missing"] == h["missing"]


def _counter_outlives_power(tmp_path) -> float:  # noqa: ANN001
    """Two H100s for two hours at 300 W; GPU 1's power field stops after the first hour while its energy counter
    keeps being scraped. Backfilled into ``tmp_path/tsdb``; returns the start time."""
    from flopwatch.telemetry import dcgm_metrics as M

    t0 = WALL_A + 10 * DAY
    lines = [f"# TYPE {M.ENERGY} unknown"]
    for g in range(2):
        lab = f'UUID="GPU-{g}",gpu="{g}",pod="p{g}",modelName="NVIDIA H100 80GB HBM3"'
        lines += [f"{M.ENERGY}{{{lab}}} {5e9 + 300e3 * 15 * k:.0f} {t0 + 15 * k}" for k in range(480)]
    lines.append(f"# TYPE {M.POWER} gauge")
    for g in range(2):
        lab = f'UUID="GPU-{g}",gpu="{g}",pod="p{g}",modelName="NVIDIA H100 80GB HBM3"'
        lines += [f"{M.POWER}{{{lab}}} 300 {t0 + 15 * k}" for k in (range(480) if g == 0 else range(240))]
    om = tmp_path / "f.om"
    om.write_text("\n".join(lines) + "\n# EOF\n")
    backfill(om, tmp_path / "tsdb")
    return t0


def test_counter_count_on_demand_where_power_is_missing(tmp_path):
    """The counter's sample count is the power's (same scrape) unless power has no samples in a window; there
    the server's count_over_time is asked, and every window's count must equal it."""
    import numpy as np

    from flopwatch.fleet import PrometheusClient, ReadPlan
    from flopwatch.fleet.reader import FleetReader, _assemble, _key, _ms_range
    from flopwatch.telemetry import dcgm_metrics as M

    t0 = _counter_outlives_power(tmp_path)
    with LocalPrometheus(tmp_path / "tsdb") as p:
        client = PrometheusClient(p.url)
        reader = FleetReader(client, ReadPlan(t0, t0 + 2 * 3600, window_s=3600))
        present, keys, label = reader.discover()
        W = _ms_range(3600, client.version() < (3, 0))
        (matchers,) = reader.chunks(keys, label)
        (block,) = list(reader.blocks(matchers))
        full = client.query_range(
            f"count_over_time({M.ENERGY}{{{matchers}}}[{W}])", block.t[0], block.t[-1], 3600
        )
        ref = _assemble({"n": full}, block.t[0], block.t[-1], 3600, present)
        rows = {_key(lab): i for i, lab in enumerate(ref.labels)}
        for i, lab in enumerate(block.labels):
            assert np.array_equal(block.values["e_n"][i], ref.values["n"][rows[_key(lab)]]), lab
        assert reader.n_lazy_queries == 1
        assert np.isnan(block.values["p_n"]).sum() == 1  # GPU 1's second hour: counter only


def _span_vs_window(url, wall0, by="pod", **kw):
    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet

    out = {}
    for res in ("window", "span"):
        r = estimate_fleet(
            PrometheusClient(url),
            ReadPlan(wall0, wall0 + 7200, window_s=1800, resolution=res, **kw),
            by=by,
        )
        assert r.meta["resolution"] == res
        out[res] = r
    return out["window"], out["span"]


@pytest.mark.parametrize("fleet", ["A", "B", "C"])
def test_span_resolution_gives_the_window_answers(prom, fleet):
    """Span resolution (per-series totals from Prometheus) against window resolution on the same fleets: placement
    (GPU-hours, coverage, start/end) identical, energy and estimates within the edge approximation (docs/fleet.md),
    and per-job energy within 1 % of what the simulator integrated."""
    p, truth = prom
    wall0 = {"A": WALL_A, "B": WALL_B, "C": WALL_C}[fleet]
    by = "job" if fleet == "C" else "pod"
    win, span = _span_vs_window(p.url, wall0, by=by)
    w = {g["key"]: g for g in win.groups}
    s = {g["key"]: g for g in span.groups}
    assert set(w) == set(s)
    want = truth[fleet].jobs if fleet == "C" else truth[fleet].pods
    for k, g in s.items():
        h = w[k]
        assert g["gpus"] == h["gpus"] and g["start"] == h["start"] and g["end"] == h["end"]
        assert g["gpu_hours"] == pytest.approx(h["gpu_hours"], rel=1e-12)
        assert g["coverage"] == pytest.approx(h["coverage"], rel=1e-12)
        assert g["energy_j"] == pytest.approx(h["energy_j"], rel=2e-3), k
        assert g["energy_j"] == pytest.approx(want[k]["energy_j"], rel=0.01), k
        assert g["counter_resets"] == h["counter_resets"]
        for f in ("estimate_flops", "lower_flops", "upper_flops", "pipe_estimate_flops"):
            if h[f] is None:
                assert g[f] is None
            else:
                assert g[f] == pytest.approx(h[f], rel=0.01), (k, f)
        assert g["missing"] == h["missing"] and g["verdict"] == h["verdict"]
        # one utilisation note per group, however many GPU-jobs were below the gate
        assert sum(n.startswith("mean utilisation") for n in g["notes"]) <= 1
    if fleet == "A":  # one counter reset per GPU: those GPUs are read again per window
        assert span.meta["regrid_gpus"] > 0
    assert span.meta["unattributed_series"] == win.meta["unattributed_series"]
    # GPUs between jobs: Σ power × step at both (not the counter's max − min over the jobs that ran between)
    assert span.meta["unattributed_energy_j"] == pytest.approx(win.meta["unattributed_energy_j"], rel=1e-9)
    assert win.meta["unattributed_energy_j"] > 0


def test_span_resolution_namespace_selector_and_gpus(prom):
    p, _ = prom
    win, span = _span_vs_window(p.url, WALL_A, by="namespace")
    assert {g["key"]: round(g["gpu_hours"], 9) for g in span.groups} == {
        g["key"]: round(g["gpu_hours"], 9) for g in win.groups
    }
    win, span = _span_vs_window(p.url, WALL_A, by="gpu", matchers='Hostname="node-0000"')
    assert len(span.groups) == len(win.groups) == 4


def test_span_resolution_counter_without_power(tmp_path):
    """A GPU whose power field stops while its counter goes on: span resolution counts the counter's samples."""
    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet

    t0 = _counter_outlives_power(tmp_path)
    with LocalPrometheus(tmp_path / "tsdb") as p:
        got = {}
        for res in ("window", "span"):
            r = estimate_fleet(PrometheusClient(p.url), ReadPlan(t0, t0 + 7200, resolution=res), by="pod")
            got[res] = {g["key"]: g for g in r.groups}
    for pod in ("p0", "p1"):
        # 300 W; the range (t0, t0 + 7200] holds 479 of the 480 samples (the one at t0 opens it): 7 170 s between
        # the first and last, plus half a step at each end — as at window resolution
        assert got["span"][pod]["energy_j"] == pytest.approx(300 * 7185, rel=1e-9)
        assert got["span"][pod]["energy_j"] == pytest.approx(got["window"][pod]["energy_j"], rel=1e-9)
        assert got["span"][pod]["gpu_hours"] == pytest.approx(got["window"][pod]["gpu_hours"])


def test_span_energy_of_jobs_cut_by_the_range_equals_window_resolution(tmp_path):
    """Jobs with one, two and three counter samples before the range ends, and one that runs past it: span
    resolution gives the window reader's energy (a single sample: its step from its power, not 0 J; a short job cut
    by the end: no extrapolation to the range boundary, as increase() did: +15 % on a 2-sample job)."""
    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet
    from flopwatch.telemetry import dcgm_metrics as M

    t0 = WALL_A + 20 * DAY
    end = t0 + 7200
    # pod → (first sample time, samples, watts); samples 15 s apart on GPU i
    jobs = {"one": (end - 10, 1, 310.0), "two": (end - 25, 2, 420.0), "three": (end - 40, 3, 530.0)}
    jobs |= {"long": (t0 + 600, 560, 640.0)}  # 600 s in, to 1 500 s past the end
    lines: list[str] = []
    for kind, typ in ((M.ENERGY, "counter"), (M.POWER, "gauge")):
        lines.append(f"# TYPE {kind} {'unknown' if typ == 'counter' else typ}")
        for g, (pod, (first, n, watts)) in enumerate(jobs.items()):
            lab = f'UUID="GPU-{g}",gpu="{g}",pod="{pod}",modelName="NVIDIA H100 80GB HBM3"'
            for k in range(n):
                v = 7e9 + watts * 1e3 * 15 * k if kind == M.ENERGY else watts
                lines.append(f"{kind}{{{lab}}} {v:.0f} {first + 15 * k:.3f}")
    om = tmp_path / "f.om"
    om.write_text("\n".join(lines) + "\n# EOF\n")
    backfill(om, tmp_path / "tsdb")
    with LocalPrometheus(tmp_path / "tsdb") as p:
        got = {}
        for res in ("window", "span"):
            r = estimate_fleet(PrometheusClient(p.url), ReadPlan(t0, end, resolution=res), by="pod")
            got[res] = {g["key"]: g for g in r.groups}
    assert set(got["span"]) == set(jobs)
    for pod in jobs:
        w, s = got["window"][pod], got["span"][pod]
        assert s["energy_j"] == pytest.approx(w["energy_j"], rel=1e-9), pod
        assert s["gpu_hours"] == pytest.approx(w["gpu_hours"], rel=1e-12)
        assert s["energy_from_power_j"] == w["energy_from_power_j"] == 0.0  # the counter was there
        assert s["missing"] == w["missing"]
    # a single sample stands for one step at its power; the others for their samples' steps
    assert got["span"]["one"]["energy_j"] == pytest.approx(310.0 * 15, rel=1e-9)
    assert got["span"]["two"]["energy_j"] == pytest.approx(420.0 * 30, rel=1e-9)
