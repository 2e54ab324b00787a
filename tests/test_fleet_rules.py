"""Recording rules: the rules file, and rule-series answers equal to raw-series answers on a real Prometheus.

Raw series are backfilled with promtool; the rule series are backfilled from them by promtool evaluating the
rules file through the running Prometheus (``promtool tsdb create-blocks-from rules``), as an operator adding
the rules to an existing Prometheus would; Prometheus is then restarted over both.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess

import pytest
import yaml

from flopwatch.fleet.localprom import LocalPrometheus, backfill, find_tool
from flopwatch.fleet.rules import JOB_RULES, RULE_QUERIES, SERIES_RULES, rules, rules_yaml, window_suffix

HAVE_PROM = find_tool("promtool") is not None and find_tool("prometheus") is not None
WALL = 1_700_000_000.0 - 1_700_000_000.0 % 3600  # on the hour
HOURS = 2.0
WINDOW = 1800.0
JOBS = [
    {
        "name": "train",
        "namespace": "research",
        "gpus": 4,
        "start_h": 0.2,
        "hours": 1.5,
        "workload": "llm-7b-bf16",
    },
    {"name": "vit", "namespace": "prod", "gpus": 2, "start_h": 0.1, "hours": 1.2, "workload": "vit-fp32"},
]


def test_rules_file_is_valid_yaml_with_one_rule_per_aggregate() -> None:
    doc = yaml.safe_load(rules_yaml(3600, 2))
    (group,) = doc["groups"]
    assert group["interval"] == "1h"
    names = [r["record"] for r in group["rules"]]
    per_series = [n for n in names if n.startswith("flopwatch:")]
    per_job = [n for n in names if n.startswith("flopwatch_job:")]
    per_gpu = [n for n in names if n.startswith("flopwatch_gpu:")]
    assert len(names) == len(set(names)) == len(per_series) + len(per_job) + len(per_gpu)
    assert len(per_series) == len({(m, op) for m, _f, op in RULE_QUERIES.values()}) + len(SERIES_RULES)
    assert len(per_job) == len({(m, op) for m, op, _t in JOB_RULES.values()})
    assert sorted(per_gpu) == [
        "flopwatch_gpu:DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION:max1h",
        "flopwatch_gpu:DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION:resets1h",
    ]
    assert all(n.split(":")[1].startswith("DCGM_FI_") and n.endswith("1h") for n in names)
    assert "flopwatch:DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION:resets1h" in names
    # the job-level rules keep the job labels and the model, and multiply activity by the clock per window
    by = "sum by (pod, namespace, exported_pod, exported_namespace, hpc_job, Hostname, instance, exported_instance, modelName)"
    exprs = {r["record"]: r["expr"] for r in group["rules"]}
    assert exprs["flopwatch_job:DCGM_FI_PROF_PIPE_TENSOR_ACTIVE:sum_x_clock1h"] == (
        f"{by} (sum_over_time(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE[3599999ms]) * "
        "avg_over_time(DCGM_FI_DEV_SM_CLOCK[3599999ms]))"
    )
    # 2.x ranges are closed: window − 1 ms; 3.x left-open: the window
    assert all("[3599999ms]" in r["expr"] for r in group["rules"])
    assert all("[3600000ms]" in e for _n, e in rules(3600, 3))
    sel = yaml.safe_load(rules_yaml(1800, 3, 'job="dcgm"'))["groups"][0]["rules"]
    assert all('{job="dcgm"}[1800000ms]' in r["expr"] for r in sel)
    assert all(r["expr"].count("[") == r["expr"].count('{job="dcgm"}[') for r in sel)


def test_window_suffix() -> None:
    assert [window_suffix(s) for s in (3600, 7200, 1800, 90)] == ["1h", "2h", "30m", "90s"]


def test_cli_writes_the_rules_file(tmp_path) -> None:
    from typer.testing import CliRunner

    from flopwatch.cli import app

    out = tmp_path / "r.yml"
    r = CliRunner().invoke(app, ["fleet", "rules", "--window", "30m", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(out.read_text())["groups"][0]["interval"] == "30m"


def test_cli_rules_file_goes_through_the_output_guard(tmp_path, capsys) -> None:
    from flopwatch.cli import main

    out = tmp_path / "r.yml"
    assert main(["fleet", "rules", "--window", "30m", "-o", str(out)]) == 0
    # an existing file is kept unless --force; a directory is refused: one line each, exit 2
    capsys.readouterr()
    assert main(["fleet", "rules", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "exists" in err and err.count("\n") == 1
    assert yaml.safe_load(out.read_text())["groups"][0]["interval"] == "30m"
    assert main(["fleet", "rules", "--force", "-o", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["groups"][0]["interval"] == "1h"
    assert main(["fleet", "rules", "-o", str(tmp_path)]) == 2


@pytest.fixture(scope="module")
def prom_rules(tmp_path_factory):
    if not HAVE_PROM:
        pytest.skip("needs promtool and prometheus (Debian package 'prometheus')")
    from flopwatch.sim.dcgm import SimulatedFleet, load_fleet_schedule

    d = tmp_path_factory.mktemp("fleet_rules")
    sched = d / "jobs.json"
    sched.write_text(json.dumps({"jobs": JOBS}))
    fleet = SimulatedFleet(
        8,
        HOURS,
        load_fleet_schedule(sched),
        device="h100",
        gpus_per_node=4,
        wall0=WALL,
        seed=5,
        resets=1,
        drop=0.02,
    )
    tsdb = d / "tsdb"
    truth = fleet.write_openmetrics(d / "a.om")
    backfill(d / "a.om", tsdb)
    _backfill_rules(tsdb, d, WALL, WALL + HOURS * 3600 + WINDOW)
    with LocalPrometheus(tsdb) as p:
        yield p, truth


def _backfill_rules(tsdb, d, start: float, end: float) -> None:
    """promtool evaluates flopwatch's rules file over [start, end] through a Prometheus serving ``tsdb``, and the
    rule blocks join the raw ones."""
    out = d / "rule_blocks"
    with LocalPrometheus(tsdb) as p:
        from flopwatch.telemetry.prom_client import PrometheusClient

        major = PrometheusClient(p.url).version()[0]
        (d / "rules.yml").write_text(rules_yaml(WINDOW, major))
        r = subprocess.run(
            [
                str(find_tool("promtool")),
                "tsdb",
                "create-blocks-from",
                "rules",
                f"--start={int(start)}",
                f"--end={int(end)}",
                f"--url={p.url}",
                f"--output-dir={out}",
                "--quiet",
                str(d / "rules.yml"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert r.returncode == 0, r.stderr[-500:]
    for block in out.iterdir():
        if block.is_dir():
            shutil.move(str(block), tsdb / block.name)


def _run(url, rules, start=WALL, end=WALL + HOURS * 3600, resolution="window"):
    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet

    plan = ReadPlan(start, end, window_s=WINDOW, gpus_per_chunk=4, rules=rules, resolution=resolution)
    return estimate_fleet(PrometheusClient(url), plan, by="pod")


def test_rule_series_give_the_raw_answers(prom_rules) -> None:
    from datetime import datetime

    p, truth = prom_rules
    # promtool evaluates the group at its hash offset within the interval, as a live Prometheus would: require
    # widens the span to that grid, and the raw path over the same span must give the same answers
    ruled = _run(p.url, "require")
    start = datetime.fromisoformat(ruled.meta["start"].replace("Z", "+00:00")).timestamp()
    assert WALL - WINDOW < start <= WALL
    assert ruled.meta["rules_note"] is None or "widened" in ruled.meta["rules_note"]
    raw = _run(p.url, "off", start=start)
    assert raw.meta["read_from"] == "raw series"
    assert ruled.meta["read_from"] == "recording rules"
    assert [g["key"] for g in ruled.groups] == [g["key"] for g in raw.groups] == sorted(truth.pods)
    for a, b in zip(raw.groups, ruled.groups, strict=True):
        assert b["energy_j"] == pytest.approx(truth.pods[b["key"]]["energy_j"], rel=0.01)
        for k in (
            "energy_j",
            "net_energy_j",
            "estimate_flops",
            "lower_flops",
            "upper_flops",
            "pipe_estimate_flops",
        ):
            assert b[k] == pytest.approx(a[k], rel=1e-9, abs=1e-6), (b["key"], k)
        assert (b["gpus"], b["verdict"], b["missing"]) == (a["gpus"], a["verdict"], a["missing"])
        assert b["coverage"] == pytest.approx(a["coverage"], rel=1e-12)  # summed in another chunk order
    # auto uses them when the start is on their grid
    assert _run(p.url, "auto", start=start).meta["read_from"] == "recording rules"


def test_span_resolution_on_rule_series(prom_rules) -> None:
    """Span totals from the rule series (Σ of window sums, counter max − min) against span totals from the raw
    samples and against window resolution over the rules: the same placement, energy within the edge term."""
    from datetime import datetime

    p, truth = prom_rules
    win = _run(p.url, "require")
    start = datetime.fromisoformat(win.meta["start"].replace("Z", "+00:00")).timestamp()
    span_rules = _run(p.url, "require", start=start, resolution="span")
    span_raw = _run(p.url, "off", start=start, resolution="span")
    assert span_rules.meta["read_from"] == "recording rules" and span_raw.meta["read_from"] == "raw series"
    assert span_rules.meta["resolution"] == "span"
    for a, b, c in zip(win.groups, span_rules.groups, span_raw.groups, strict=True):
        assert a["key"] == b["key"] == c["key"]
        assert b["gpu_hours"] == pytest.approx(a["gpu_hours"], rel=1e-12) == c["gpu_hours"]
        assert b["start"] == a["start"] == c["start"] and b["end"] == a["end"] == c["end"]
        assert b["energy_j"] == pytest.approx(truth.pods[b["key"]]["energy_j"], rel=0.01)
        assert b["energy_j"] == pytest.approx(a["energy_j"], rel=2e-3)
        assert b["energy_j"] == pytest.approx(c["energy_j"], rel=2e-3)
        assert b["pipe_estimate_flops"] == pytest.approx(c["pipe_estimate_flops"], rel=1e-9)
        assert b["counter_resets"] == a["counter_resets"]


def test_off_grid_start_falls_back_or_fails(prom_rules) -> None:
    from flopwatch.errors import InputError

    p, _ = prom_rules
    res = _run(p.url, "auto", start=WALL + 1, end=WALL + 3601)
    assert res.meta["read_from"] == "raw series"
    assert "grid" in res.meta["rules_note"]
    # require fails with the reason when there are no rule series for the plan's window
    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet

    with pytest.raises(InputError, match="--rules require: rule series missing"):
        estimate_fleet(PrometheusClient(p.url), ReadPlan(WALL, WALL + 7200, window_s=3600, rules="require"))


def test_missing_rules_fall_back_to_raw(prom_rules) -> None:
    """Rules for another window do not exist: auto reads raw and says why."""
    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet

    p, _ = prom_rules
    plan = ReadPlan(WALL, WALL + HOURS * 3600, window_s=3600, rules="auto")
    res = estimate_fleet(PrometheusClient(p.url), plan, by="pod")
    assert res.meta["read_from"] == "raw series"
    assert "missing" in res.meta["rules_note"]


def test_span_on_rules_reads_pipes_from_the_job_level_rules(prom_rules) -> None:
    """With the job-level rules, span resolution reads per GPU only energy and utilisation; the pipes, SM activity
    and power limit come summed per job, weighted by the clock per window as the window reader weights them."""
    from datetime import datetime

    p, _truth = prom_rules
    win = _run(p.url, "require")
    start = datetime.fromisoformat(win.meta["start"].replace("Z", "+00:00")).timestamp()
    span = _run(p.url, "require", start=start, resolution="span")
    assert span.meta["pipes_from"] == "job-level rules" and span.meta["job_rules_note"] is None
    assert win.meta["pipes_from"] is None
    # the simulated counter reset is found by the GPU-level rules and that GPU re-read per window
    assert span.meta["regrid_gpus"] >= 1
    assert [g["counter_resets"] for g in span.groups] == [g["counter_resets"] for g in win.groups]
    assert sum(g["counter_resets"] for g in span.groups) >= 1
    for a, b in zip(win.groups, span.groups, strict=True):
        assert b["pipe_estimate_flops"] == pytest.approx(a["pipe_estimate_flops"], rel=1e-9)
        assert b["pipe_lower_flops"] == pytest.approx(a["pipe_lower_flops"], rel=1e-9)
        assert b["mean_sm_active"] == pytest.approx(a["mean_sm_active"], rel=1e-9)
        assert b["power_limit_w"] == a["power_limit_w"]
        assert (b["dtypes"], b["missing"], b["disagree"]) == (a["dtypes"], a["missing"], a["disagree"])
        assert b["notes"] == a["notes"]


def test_job_level_rules_stand_in_only_where_they_can(prom_rules, monkeypatch) -> None:
    """Grouping or selecting on a label the job-level rules drop, or job-level rules absent (a rules file from
    before them): the pipes are read per GPU, and the output says why; the answers agree."""
    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet
    from flopwatch.fleet import rules as rules_mod

    p, _truth = prom_rules
    from datetime import datetime

    start = datetime.fromisoformat(_run(p.url, "require").meta["start"].replace("Z", "+00:00")).timestamp()
    job = _run(p.url, "require", start=start, resolution="span")

    def span(by="pod", selector=""):
        plan = ReadPlan(
            start,
            WALL + HOURS * 3600,
            window_s=WINDOW,
            gpus_per_chunk=4,
            rules="require",
            resolution="span",
            matchers=selector,
        )
        return estimate_fleet(PrometheusClient(p.url), plan, by=by)

    gpu = span(by="gpu")
    assert gpu.meta["pipes_from"] == "per GPU" and "do not keep UUID" in gpu.meta["job_rules_note"]
    sel = span(selector='gpu=~"[0-9]+"')
    assert sel.meta["pipes_from"] == "per GPU" and "--selector uses gpu" in sel.meta["job_rules_note"]
    ok = span(selector='namespace=~"research|prod",Hostname=~"node-.*"')
    assert ok.meta["pipes_from"] == "job-level rules"
    ns = span(by="namespace")  # several jobs per group: their dtypes may differ
    assert ns.meta["pipes_from"] == "per GPU" and "holds several jobs" in ns.meta["job_rules_note"]
    monkeypatch.setattr(rules_mod, "JOB_LEVEL", "flopwatch_nojob")
    old = span()
    assert old.meta["pipes_from"] == "per GPU" and "job-level rules missing" in old.meta["job_rules_note"]
    for a, b, c in zip(job.groups, old.groups, sel.groups, strict=True):
        assert a["key"] == b["key"] == c["key"]
        # per GPU: Σa × the series' mean clock; job level: per window (equal here: the clock holds within a job)
        assert a["pipe_estimate_flops"] == pytest.approx(b["pipe_estimate_flops"], rel=1e-6)
        assert b["pipe_estimate_flops"] == c["pipe_estimate_flops"]
        assert a["estimate_flops"] == b["estimate_flops"] and a["energy_j"] == b["energy_j"]
        assert a["mean_sm_active"] == pytest.approx(b["mean_sm_active"], rel=1e-9)
        assert (a["missing"], a["dtypes"]) == (b["missing"], b["dtypes"])


def test_cli_table_says_where_the_pipes_came_from(prom_rules, capsys) -> None:
    from datetime import datetime

    from flopwatch.cli import main

    p, _truth = prom_rules
    start = datetime.fromisoformat(_run(p.url, "require").meta["start"].replace("Z", "+00:00")).timestamp()
    common = [
        "fleet",
        "estimate",
        "--prometheus",
        p.url,
        "--start",
        f"{start:.3f}",
        "--end",
        str(WALL + 7200),
    ]
    common += ["--window", "30m", "--rules", "require", "--resolution", "span", "--no-progress"]
    assert main([*common, "--by", "pod"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps lines
    assert "pipes from job-level rules" in out and "recording rules:" not in out
    assert main([*common, "--by", "gpu"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "pipes from per GPU" in out
    assert "recording rules: job-level rules not used: they do not keep UUID" in out


def test_counter_rise_rule_telescopes_to_max_minus_min(tmp_path, monkeypatch) -> None:
    """Span resolution reads the counter's energy from its rise rule (one series per GPU-job) where it can: jobs cut
    by the range start (their first window's rise reaches back to the last sample before the range, which stands
    for the step max − min gets from n/(n − 1)), one that leaves and comes back after two empty windows (read per
    window, as a counter reset is: its count of samples does not span the gap), one starting late, one inside the
    first window. Energies equal window resolution and the max − min path (rise rule hidden) to 1e-9 at steady
    power; where the power steps up just inside the range, the cut job's edge step is at the power before the range
    instead of its mean: within 2e-3, span resolution's edge approximation."""
    if not HAVE_PROM:
        pytest.skip("needs promtool and prometheus (Debian package 'prometheus')")
    from datetime import datetime

    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet
    from flopwatch.fleet import rules as rules_mod
    from flopwatch.telemetry import dcgm_metrics as M

    t0, hours = WALL, 4.0
    end = t0 + hours * 3600
    # pod → (segments of 15 s samples, watts or (watts, until, then watts)); the counter counts on through a gap (the
    # GPU does, unscraped)
    jobs: dict[str, tuple[list[tuple[float, float]], float | tuple[float, float, float]]] = {
        "cut": ([(t0 - 3600, end + 600)], 400.0),
        "ramp": ([(t0 - 3600, t0 + 7200)], (300.0, t0 + 600, 650.0)),
        "gap": ([(t0 + 900, t0 + 3300), (t0 + 7500, t0 + 10800)], 500.0),
        "late": ([(t0 + 5000, t0 + 9000)], 300.0),
        "short": ([(t0 + 100, t0 + 1000)], 250.0),
        "": ([(t0 + 1500, t0 + 3000), (t0 + 9500, end)], 80.0),  # GPU-4, unlabelled: idle between two jobs
    }
    gauges = {M.POWER: None, M.GR_ACTIVE: 0.9, M.TENSOR: 0.5, M.SM_CLOCK: 1980.0}
    lines: list[str] = [f"# TYPE {M.ENERGY} unknown"] + [f"# TYPE {g} gauge" for g in gauges]
    body: dict[str, list[str]] = {M.ENERGY: [], **{g: [] for g in gauges}}
    for i, (pod, (segments, power)) in enumerate(jobs.items()):
        job = f'pod="{pod}",namespace="ns",' if pod else ""
        lab = f'UUID="GPU-{i}",gpu="{i}",Hostname="node-0",{job}modelName="NVIDIA H100 80GB HBM3"'
        w1, switch, w2 = power if isinstance(power, tuple) else (power, math.inf, power)
        energy_mj, t_prev = 5e9, segments[0][0]
        for a, b in segments:
            for k in range(int((b - a) // 15)):
                t = a + 15 * k
                energy_mj += 1e3 * (
                    w1 * (min(t, switch) - min(t_prev, switch)) + w2 * max(0.0, t - max(t_prev, switch))
                )
                t_prev = t
                watts = w1 if t < switch else w2
                body[M.ENERGY].append(f"{M.ENERGY}{{{lab}}} {energy_mj:.0f} {t:.3f}")
                for g, v in gauges.items():
                    body[g].append(f"{g}{{{lab}}} {watts if v is None else v} {t:.3f}")
    om_lines = []
    for name in body:  # one metric family after another, as OpenMetrics wants
        om_lines += [x for x in lines if x.split()[2] == name] + body[name]
    om = tmp_path / "f.om"
    om.write_text("\n".join(om_lines) + "\n# EOF\n")
    tsdb = tmp_path / "tsdb"
    backfill(om, tsdb)
    _backfill_rules(tsdb, tmp_path, t0 - 3600, end + WINDOW)

    def run(url: str, start: float, resolution: str):
        plan = ReadPlan(start, end, window_s=WINDOW, rules="require", resolution=resolution)
        return estimate_fleet(PrometheusClient(url), plan, by="pod")

    with LocalPrometheus(tsdb) as p:
        win = run(p.url, t0, "window")
        start = datetime.fromisoformat(win.meta["start"].replace("Z", "+00:00")).timestamp()
        span = run(p.url, start, "span")
        monkeypatch.setitem(rules_mod.SERIES_RULES, "e_rise", (M.ENERGY, "norise", "x"))
        old = run(p.url, start, "span")
    assert span.meta["counter_from"] == "rise rule" and span.meta["pipes_from"] == "job-level rules"
    assert old.meta["counter_from"] == "max − min" and "no flopwatch:" in old.meta["job_rules_note"]
    assert win.meta["counter_from"] is None
    # the rise's three checks (and the gap's GPU read per window in both)
    assert span.meta["queries"] == old.meta["queries"] + 3
    assert span.meta["regrid_gpus"] == old.meta["regrid_gpus"] == 1
    assert [g["key"] for g in span.groups] == sorted(k for k in jobs if k)
    # the idle series: Σ power × step over its 100 + 326 samples at every resolution (its counter's max − min would
    # hold the gap's energy: other jobs' on a real GPU)
    for r in (win, span, old):
        assert r.meta["unattributed_energy_j"] == pytest.approx(80.0 * 15 * 426, rel=1e-9)
    for a, b, c in zip(win.groups, span.groups, old.groups, strict=True):
        rel = (
            2e-3 if b["key"] == "ramp" else 1e-9
        )  # the edge approximation of span resolution (docs/fleet.md)
        assert b["energy_j"] == pytest.approx(a["energy_j"], rel=rel), b["key"]
        assert b["energy_j"] == pytest.approx(c["energy_j"], rel=rel), b["key"]
        assert b["gpu_hours"] == pytest.approx(a["gpu_hours"], rel=1e-12)
    # the ramp: its first step at 300 W (before the range) where max − min's edge is the mean over the range
    ramp = {
        r: next(g["energy_j"] for g in x.groups if g["key"] == "ramp")
        for r, x in (("rise", span), ("mm", old))
    }
    assert 0 < ramp["mm"] - ramp["rise"] < 15 * (650 - 300)
    # the gap's energy is the counter's: 500 W from its first sample to its last
    gap = next(g for g in span.groups if g["key"] == "gap")
    assert gap["energy_j"] == pytest.approx(500.0 * (10800 - 15 - 900 + 15), rel=1e-9)
