"""Fleet pieces without a Prometheus: times and selectors, the client's errors, the planner's arithmetic, the
fold of window answers into GPU-jobs, devices and the power model, the simulated fleet's OpenMetrics."""

from __future__ import annotations

import dataclasses
import io
import json
import urllib.error
import urllib.parse

import numpy as np
import pytest

from flopwatch.errors import InputError
from flopwatch.fleet.plan import ReadPlan
from flopwatch.telemetry import dcgm_metrics as M
from flopwatch.telemetry.prom_client import PrometheusClient, PrometheusError
from flopwatch.telemetry.timespec import parse_duration, parse_time, selector_matchers


def test_times_durations_selectors():
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000.0
    assert parse_time("2023-11-15T00:13:20+02:00") == 1_700_000_000.0
    assert parse_time("1700000000.5") == 1_700_000_000.5
    for bad in ("yesterday", "2023-11-14T22:13:20", "-5"):
        with pytest.raises(InputError):
            parse_time(bad)
    assert parse_duration("15s") == 15 and parse_duration("1h30m") == 5400 and parse_duration("90") == 90
    with pytest.raises(InputError):
        parse_duration("15 parsecs")
    assert selector_matchers('{namespace="research", pod=~"a.*"}') == 'namespace="research", pod=~"a.*"'
    assert selector_matchers(None) == "" and selector_matchers("{}") == ""
    for bad in ('namespace="x"', '{namespace="x}', '{__name__="x"}'):
        with pytest.raises(InputError):
            selector_matchers(bad)


def test_plan_rejects_a_step_too_coarse():
    with pytest.raises(InputError, match="too coarse"):
        ReadPlan(0, 86400, step_s=600).check()
    with pytest.raises(InputError, match="too coarse"):
        ReadPlan(0, 100, step_s=60).check()
    with pytest.raises(InputError, match="after start"):
        ReadPlan(10, 10).check()


class _Opener:
    """Transport double: answers from a list (exceptions are raised)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []

    def open(self, req, timeout):
        self.requests.append(req)
        a = self.answers.pop(0)
        if isinstance(a, BaseException):
            raise a
        return io.BytesIO(json.dumps(a).encode())


def test_client_retries_then_names_the_server():
    op = _Opener([urllib.error.URLError("Connection refused")] * 3)
    waits = []
    c = PrometheusClient("http://user:secret@prom.example:9090", retries=2, opener=op, sleep=waits.append)
    with pytest.raises(PrometheusError, match="cannot reach Prometheus") as e:
        c.query("up")
    assert "secret" not in str(e.value) and len(op.requests) == 3 and waits == [0.5, 1.0]


def test_client_passes_prometheus_errors_and_parses_ranges():
    bad = urllib.error.HTTPError(
        "u",
        400,
        "Bad Request",
        {},
        io.BytesIO(b'{"status":"error","errorType":"bad_data","error":"parse error"}'),
    )
    c = PrometheusClient("prom:9090", opener=_Opener([bad]), sleep=lambda s: None)
    with pytest.raises(PrometheusError, match="bad_data: parse error"):
        c.query("up{")
    ok = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {"UUID": "GPU-1"}, "values": [[10, "1.5"], [20, "NaN"]]}],
        },
    }
    c = PrometheusClient("prom:9090", opener=_Opener([ok]))
    ans = c.query_range("x", 10, 20, 10)
    (s,) = ans  # a "NaN" value is no sample: left out, and named (tests/hostile/test_prometheus_client.py)
    assert s.labels == {"UUID": "GPU-1"} and s.t.tolist() == [10] and s.v.tolist() == [1.5]
    assert len(ans.degradations) == 1 and "NaN" in ans.degradations[0]
    with pytest.raises(PrometheusError, match="11000"):
        c.query_range("x", 0, 1e6, 1)
    # several series are converted together and split back per series; empty ones are dropped
    many = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": {"UUID": "GPU-1"}, "values": [[10, "1"], [20, "2"], [30, "3"]]},
                {"metric": {"UUID": "GPU-2"}, "values": []},
                {"metric": {"UUID": "GPU-3"}, "values": [[20, "-4.5e3"]]},
                {"metric": {"UUID": "GPU-4"}, "values": [[10, "NaN"], [30, "7"]]},
            ],
        },
    }
    c = PrometheusClient("prom:9090", opener=_Opener([many]))
    a, b, d = c.query_range("x", 10, 30, 10)
    assert [x.labels["UUID"] for x in (a, b, d)] == ["GPU-1", "GPU-3", "GPU-4"]
    assert a.t.tolist() == [10, 20, 30] and a.v.tolist() == [1.0, 2.0, 3.0]
    assert b.t.tolist() == [20] and b.v.tolist() == [-4500.0]
    assert d.t.tolist() == [30] and d.v.tolist() == [7.0]
    # instant answers as (labels, one array of values): what the span reader reads a fleet's GPU-jobs with
    vec = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"UUID": "GPU-1"}, "value": [30, "2.5"]},
                {"metric": {"UUID": "GPU-2"}, "value": [30, "NaN"]},
                {"metric": {"UUID": "GPU-3"}, "value": [30, "-7"]},
            ],
        },
    }
    c = PrometheusClient(
        "prom:9090",
        opener=_Opener([vec, {"status": "success", "data": {"resultType": "vector", "result": []}}]),
    )
    got = c.query("x", 30)
    assert [x.labels["UUID"] for x in got] == ["GPU-1", "GPU-3"]  # GPU-2's NaN: no sample, named
    assert [x.v.tolist() for x in got] == [[2.5], [-7.0]] and "NaN" in c.degradations[0]
    assert c.query("y") == []


def test_simulated_fleet_openmetrics(tmp_path):
    from flopwatch.sim.dcgm import FAMILIES, SimulatedFleet, random_schedule

    f = SimulatedFleet(
        2,
        1.0,
        random_schedule(2, 1.0, gpus_per_node=2, seed=4),
        device="a100",
        gpus_per_node=2,
        seed=4,
        omit=["DCGM_FI_DEV_GPU_TEMP"],
    )
    out = tmp_path / "f.om"
    truth = f.write_openmetrics(out)
    lines = out.read_text().splitlines()
    assert lines[-1] == "# EOF" and lines[0].startswith("# HELP flopwatch_simulated")
    types = [x.split()[2] for x in lines if x.startswith("# TYPE")]
    assert len(types) == len(set(types))  # each family once …
    names = [x.split("{")[0] for x in lines if x.startswith("DCGM")]
    runs = [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]
    assert len(runs) == len(set(runs))  # … and contiguous, as OpenMetrics requires
    assert (
        "DCGM_FI_DEV_GPU_TEMP" not in types and "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE" not in types
    )  # not Hopper
    assert len(types) == len(FAMILIES) - 2 + 1
    assert [f[0] for f in FAMILIES] == [m.name for m in M.TABLE]  # derived from the one table
    assert truth.pods and all(
        p["simulated"] and p["energy_j"] > 0 and p["flops"] > 0 for p in truth.pods.values()
    )
    sample = next(x for x in lines if x.startswith("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{") and 'pod="' in x)
    assert (
        'UUID="GPU-' in sample
        and 'modelName="NVIDIA A100-SXM4-80GB"' in sample
        and 'Hostname="node-0000"' in sample
    )


def test_cli_unreachable_server_is_one_line_exit_2(capsys):
    from flopwatch.cli import main
    from prom_helpers import free_port

    port = free_port()  # nothing listens there
    rc = main(
        [
            "fleet",
            "estimate",
            "--prometheus",
            f"http://127.0.0.1:{port}",
            "--start",
            "0",
            "--end",
            "3600",
            "--retries",
            "0",
            "--timeout",
            "2",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "cannot reach Prometheus" in err and err.count("\n") == 1


def test_prometheus_sensor_spec_parsing():
    from flopwatch.telemetry.sensors.prometheus import parse_spec

    url, opts = parse_spec('http://p:9090/prom?match={Hostname="n1"}&gpu=0')
    assert url == "http://p:9090/prom" and opts == {"match": '{Hostname="n1"}', "gpu": "0"}
    with pytest.raises(InputError, match="unknown"):
        parse_spec("http://p:9090?foo=1")


def test_cli_sim_openmetrics_writes_truth_and_refuses_to_overwrite(tmp_path, capsys):
    from flopwatch.cli import main

    out = tmp_path / "f.om"
    args = [
        "sim",
        "openmetrics",
        "--gpus",
        "2",
        "--hours",
        "0.25",
        "--gpus-per-node",
        "2",
        "--device",
        "l4",
        "--label-style",
        "hpc",
        "-o",
        str(out),
    ]
    assert main(args) == 0
    truth = json.loads((tmp_path / "f.om.truth.json").read_text())
    assert truth["simulated"] is True and truth["device"] == "l4" and truth["jobs"]
    assert 'hpc_job="' in out.read_text()
    assert "SIMULATED" in capsys.readouterr().out
    assert main(args) == 2 and "exists" in capsys.readouterr().err
    from prom_helpers import backfill, find_tool

    if find_tool("promtool"):
        backfill(out, tmp_path / "tsdb")  # what the command promises: promtool accepts it
        assert any((tmp_path / "tsdb").iterdir())


# ------------------------------------------------------------------------------------------------ the planner
def test_planner_keeps_every_query_inside_the_engine_limits_at_10000_gpus_30_days():
    from flopwatch.fleet.plan import MAX_QUERY_BYTES, PROM_MAX_SAMPLES, chunking

    plan = ReadPlan(0.0, 30 * 86400.0).check()
    cut = chunking(plan, 10_000, key_bytes=40 + 4)  # "GPU-" + UUID, escaped
    # 10,000 GPUs × 30 days at 15 s would be 1.7e9 samples per metric in one query
    assert 10_000 * 30 * 86400 / 15 > 30 * PROM_MAX_SAMPLES
    assert cut.samples_per_query <= PROM_MAX_SAMPLES / 4
    assert cut.query_bytes < MAX_QUERY_BYTES
    spans = cut.time_chunks(plan)
    assert spans[0][0] == 3600.0 and spans[-1][1] == 30 * 86400.0  # the windows are tiled …
    n = sum(round((b - a) / 3600) + 1 for a, b in spans)
    assert n == 30 * 24  # … once each
    n_chunks = -(-10_000 // cut.gpus_per_chunk) * len(spans)
    assert n_chunks < 2000  # a fleet-month in a bounded number of queries per metric
    # a real query string of a full chunk stays under 16 KB
    import uuid

    from flopwatch.fleet.plan import gpu_matchers

    keys = [f"GPU-{uuid.UUID(int=i)}" for i in range(cut.gpus_per_chunk)]
    m = gpu_matchers(dataclasses.replace(plan, matchers='namespace="research"'), "UUID", keys)
    q = M.window_queries(frozenset(M.METRICS), m, "3600000ms")
    assert max(len(x.encode()) for x in q.values()) < MAX_QUERY_BYTES


def test_planner_refuses_a_window_over_the_budget():
    from flopwatch.fleet.plan import chunking

    with pytest.raises(InputError, match="shorter --window"):
        chunking(ReadPlan(0, 86400 * 400, step_s=1, window_s=86400 * 100, max_samples=1000), 8)


def test_every_metric_is_read_at_most_twice_and_queries_come_from_the_table():
    q = M.window_queries(frozenset(M.METRICS), 'UUID="x"', "1h")
    per_metric: dict[str, int] = {}
    for key, _fn in q:
        per_metric[key] = per_metric.get(key, 0) + 1
    assert max(per_metric.values()) <= 2
    assert ("tensor", "avg") in q and (
        "hmma",
        "avg",
    ) in q  # two views of one tensor pipe: the reader takes the larger
    assert q[("energy", "last")] == (
        "max without (DCGM_FI_DRIVER_VERSION, device, container, job, namespace, pci_bus_id) "
        '(last_over_time(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{UUID="x"}[1h]))'
    )  # labels flopwatch never reads are dropped on the server; colliding series' sample counts add
    assert q[("power", "count")].startswith("sum without (")
    assert all(m.window or m.key in ("temp", "sm") for m in M.TABLE)
    assert ("gpu_util", "avg") not in q  # a fallback where GR_ENGINE_ACTIVE is absent
    assert ("gpu_util", "avg") in M.window_queries(frozenset({M.POWER, M.GPU_UTIL}), "", "1h")
    assert ("dram", "avg") not in M.window_queries(frozenset(M.METRICS), "", "1h", frozenset({"dram"}))


# --------------------------------------------------------------------------------------- the fold on arrays
def _series(labels, t, v):
    from flopwatch.telemetry.prom_client import Columns, Series

    return Columns.of([Series(labels, np.asarray(t, float), np.asarray(v, float))])


def _reader(by=("pod",), jobs=None, window=100.0, step=10.0, end=400.0):
    from flopwatch.fleet.plan import chunking
    from flopwatch.fleet.reader import Discovery, FleetReader

    plan = ReadPlan(0.0, end, step_s=step, window_s=window).check()
    found = Discovery(frozenset({M.ENERGY, M.POWER}), ["GPU-1"], "UUID", False)

    class _C:
        def version(self):
            return (3, 0)

    return FleetReader(_C(), plan, found, chunking(plan, 1), by_labels=by, jobs=jobs)


def test_counter_bridges_gaps_and_falls_back_to_power_on_reset():
    """One series at 300 W, scraped every 10 s at t = 5, 15, … 395 s (t = 125 missed), windows of 100 s; the
    counter (mJ) reads 300e3·t and restarts at t = 250 (a driver reload)."""
    lab = {"UUID": "GPU-1", "pod": "p", "modelName": "NVIDIA H100 80GB HBM3"}
    t = [100, 200, 300, 400]
    ans = {
        ("energy", "min"): [
            _series(lab, t, [1.5e6, 31.5e6, 3.0e6, 18.0e6])
        ],  # window 3's minimum after the reset
        ("energy", "last"): [_series(lab, t, [28.5e6, 58.5e6, 15.0e6, 45.0e6])],
        ("power", "sum"): [_series(lab, t, [3000, 2700, 3000, 3000])],
        ("power", "count"): [_series(lab, t, [10, 9, 10, 10])],
    }
    jobs = _reader()._fold(ans, None)
    assert len(jobs) == 1 and jobs.job[0] == "p" and jobs.gpu[0] == "GPU-1"
    assert jobs.resets[0] == 1
    assert jobs.energy_from_power_j[0] == pytest.approx(300 * 100)  # the reset window, from power
    assert jobs.energy_j[0] == pytest.approx(300 * 400, rel=1e-12)
    assert jobs.duration_s[0] == pytest.approx(400)
    assert jobs.covered_s[0] == pytest.approx(390)  # one scrape missing
    assert (jobs.t_first[0], jobs.t_last[0]) == (0, 400)
    # the counter agrees with the power gauge where both are exact
    assert jobs.counter_j[0] == pytest.approx(jobs.counter_power_j[0])


def test_job_info_join_splits_one_gpu_series_between_jobs():
    """No job label on the DCGM series: an info series says job a holds the GPU in windows 1–2, job b in 3–4."""
    from flopwatch.fleet.reader import JobMap

    lab = {"UUID": "GPU-1", "Hostname": "n0", "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3"}
    t = [100, 200, 300, 400]
    ans = {
        ("power", "sum"): [_series(lab, t, [3000] * 4)],
        ("power", "count"): [_series(lab, t, [10] * 4)],
    }
    info = [
        _series({"job": "a", "Hostname": "n0", "gpu": "0"}, [100, 200], [1, 1]),
        _series({"job": "b", "Hostname": "n0", "gpu": "0"}, [300, 400], [1, 1]),
    ]
    jobs = _reader(jobs=JobMap(metric="slurm_job_info"))._fold(ans, info)
    got = dict(zip(jobs.job.tolist(), jobs.energy_j.tolist(), strict=True))
    assert set(got) == {"a", "b"}
    assert got["a"] + got["b"] == pytest.approx(300 * 400)
    # the same from a mapping file (GPU by UUID)
    m = JobMap(allocations=(("a", "GPU-1", 0.0, 200.0), ("b", "GPU-1", 200.0, 400.0)))
    jobs2 = _reader(jobs=m)._fold(ans, None)
    assert dict(zip(jobs2.job.tolist(), jobs2.energy_j.tolist(), strict=True)) == pytest.approx(got)


def test_mig_instances_never_count_the_whole_gpu_twice():
    """dcgm-exporter repeats the whole GPU's power on both instances: counted once, its dynamic part shared 3:1."""
    t = [100, 200]
    base = {"UUID": "GPU-1", "modelName": "NVIDIA H100 80GB HBM3"}
    a, b = base | {"GPU_I_ID": "1", "pod": "a"}, base | {"GPU_I_ID": "2", "pod": "b"}
    ans = {
        ("power", "sum"): [_series(a, t, [3000, 3000]), _series(b, t, [3000, 3000])],
        ("power", "count"): [_series(a, t, [10, 10]), _series(b, t, [10, 10])],
        ("gr", "avg"): [_series(a, t, [0.6, 0.6]), _series(b, t, [0.2, 0.2])],
    }
    jobs = _reader(end=200.0)._fold(ans, None)
    got = dict(zip(jobs.job.tolist(), jobs.energy_j.tolist(), strict=True))
    assert got["a"] + got["b"] == pytest.approx(300 * 200)  # once, not twice
    # the idle part (datasheet idle × time) by time, the rest 3:1 by activity
    from flopwatch.devices import get_device

    base = get_device("h100").idle_w * 200
    assert got["a"] - base / 2 == pytest.approx(3 * (got["b"] - base / 2))
    assert jobs.mig.all()


def test_impossible_readings_and_a_less_capable_device_never_ease_the_bound():
    from flopwatch.fleet.groups import devices_of
    from flopwatch.fleet.reader import GpuJobs

    n = 3
    cols = {f.name: np.zeros(n) for f in dataclasses.fields(GpuJobs)}
    cols |= {
        "gpu": np.array(["g0", "g1", "g2"], dtype=object),
        "model": np.array(["Orin Nano", "NVIDIA H100 80GB HBM3", ""], dtype=object),
        "peak_power_w": np.array([700.0, 650.0, 300.0]),
        "clock_max_mhz": np.array([1980.0, 1980.0, np.nan]),
    }
    jobs = GpuJobs(**cols)
    specs, unknown, impossible = devices_of(jobs, "orin-nano")
    # a 15 W part drawing 700 W: the most capable device consistent with that, not the claim
    assert impossible[0] and specs[0].key != "orin-nano" and max(specs[0].peak_flops.values()) >= 9e14
    # --device names a less capable model than the H100 reports: the H100 stands
    assert specs[1].key == "h100" and not impossible[1]
    # modelName missing: --device, unless the readings contradict it (300 W on a 15 W part)
    assert unknown[2] and impossible[2]


def test_power_model_forward_and_inverse_share_the_lines():
    from flopwatch.powermodel.device_power import power_model_for

    for dev in ("a100", "h100"):
        pm = power_model_for(dev)
        tokens = 11 * 64  # a compute-bound cell
        for mfu in (10.0, 25.0):
            p = pm.power_w("bf16", tokens, mfu)
            mid, lo, hi = pm.flop_rate("bf16", np.array([p]))
            rate = mfu / 100 * pm.mfu_peak_flops["bf16"]
            assert lo[0] <= rate <= hi[0], (dev, mfu)
        mids = pm.flop_rate("bf16", np.linspace(pm.idle_w, pm.max_w, 9))[0]
        assert np.all(np.diff(mids) >= -1e-6 * mids.max())


def test_bundled_power_cells_equal_a_fresh_fit(tmp_path):
    """The cell fits the simulator and the fleet read from the package are what the bundled MASCOTS data give
    now (stale file: ``python -m flopwatch.powermodel.device_power``)."""
    from flopwatch.powermodel.device_power import CELLS_FILE, fit_cells, write_cells
    from flopwatch.powermodel.mfu import GPU_DEVICE_KEYS

    table = json.loads(CELLS_FILE.read_text())
    assert set(table) == set(GPU_DEVICE_KEYS) | {"A100"}
    for gpu in ("A100", "L4"):
        assert table[gpu] == json.loads(json.dumps(fit_cells(gpu))), gpu
    assert json.loads(write_cells(tmp_path / "cells.json").read_text()) == table


def test_openmetrics_label_values_are_escaped(tmp_path):
    """A job named ``evil"job\\x`` (and a newline) must backfill with promtool (client_python's escaping)."""
    from flopwatch.sim.dcgm import SimulatedFleet, label_text, load_fleet_schedule

    assert label_text({"a": 'e"v\\il\n'}) == 'a="e\\"v\\\\il\\n"'
    sched = tmp_path / "s.json"
    sched.write_text(json.dumps([{"name": 'evil"job\\x', "gpus": 1, "start_s": 60, "duration_s": 600}]))
    f = SimulatedFleet(1, 0.25, load_fleet_schedule(sched), device="l4", gpus_per_node=1, seed=1)
    f.write_openmetrics(tmp_path / "f.om")
    from prom_helpers import backfill, find_tool

    if find_tool("promtool") is None:
        pytest.skip("needs promtool")
    backfill(tmp_path / "f.om", tmp_path / "tsdb")
    assert any((tmp_path / "tsdb").iterdir())


@pytest.mark.parametrize("bad", ["inf", "1e400", "0", "-1", "nan", "abc"])
def test_cli_refuses_thresholds_estimate_refuses(bad, capsys):
    from flopwatch.cli import main

    rc = main(["fleet", "estimate", "--prometheus", "http://127.0.0.1:9", "--start", "0", "--end", "3600",
               "--threshold", bad])  # fmt: skip
    assert rc == 2 and "--threshold" in capsys.readouterr().err


def test_job_map_file_errors_name_file_record_and_field(tmp_path):
    from flopwatch.cli.fleet_cmds import load_job_map

    p = tmp_path / "map.csv"
    p.write_text("job,gpu,start,end\na,GPU-1,0,3600\nb,GPU-1,3600,\n")
    with pytest.raises(InputError) as e:
        load_job_map(p)
    assert e.value.field == "end" and "map.csv" in str(e.value)
    p.write_text("job,gpu,start,end\na,GPU-1,0,3600\n")
    assert load_job_map(p) == (("a", "GPU-1", 0.0, 3600.0),)


def test_the_energy_counter_blind_share_is_unobserved_time():
    """dcgm-exporter's energy counter is NVML's: on A100/H100 it sees 25 ms of every 100 ms (sensor_timing), so
    a group's covered time is 75 % unobserved unless profiling counters cover it; unknown timing: all of it."""
    from flopwatch.devices import get_device
    from flopwatch.fleet.groups import energy_blind_fraction

    assert energy_blind_fraction(get_device("h100")) == pytest.approx(0.75)
    assert energy_blind_fraction(get_device("a100")) == pytest.approx(0.75)
    assert energy_blind_fraction(None) == 1.0


@pytest.mark.parametrize("width", [80, 160])
def test_text_output_keeps_group_names_and_verdicts_whole(width, capsys):
    """Piped or at 80/160 columns: each group's name on its own line, whole, with its verdict; notes printed."""
    from flopwatch.cli.fleet_cmds import _print_table

    row = {"gpus": 8, "gpu_hours": 10.7, "coverage": 1.0, "energy_j": 6.1e6, "net_energy_j": 3.4e6,
           "lower_flops": 0.0, "upper_flops": 6.5e17, "estimate_flops": 0.0, "pipe_estimate_flops": 2.8e17,
           "verdict": "uncertain", "notes": ["profiling counters stuck at 0 for 1.00 GPU-h while power shows load"]}  # fmt: skip
    long = "research/very-long-pod-name-of-a-training-job-7f9c2d-0"
    d = {"prometheus": "http://p:9090", "by": "pod", "start": "2026-12-01T00:00:00Z", "end": "2026-12-02T00:00:00Z",
         "threshold_flops": 1e25, "groups": [row | {"key": long}], "fleet": row | {"key": "(all GPUs)"},
         "energy_model": "built-in", "metrics_missing": [], "gpu_hours": 10.7, "elapsed_s": 1.0, "cpu_s": 0.5,
         "queries": 12, "bytes_received": 1e6, "jobs_from": "labels", "gpus_per_chunk": 8, "windows_per_chunk": 24}  # fmt: skip
    _print_table(d, width=width)
    lines = capsys.readouterr().out.splitlines()
    assert max(len(x.rstrip()) for x in lines) <= width
    assert f"{long}: uncertain" in lines and "(all GPUs): uncertain" in lines
    assert "stuck at 0" in " ".join(lines) and "model gives 0" in " ".join(lines)
