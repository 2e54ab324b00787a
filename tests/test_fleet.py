"""Fleet pieces without a Prometheus: times and selectors, the client's errors, window folding, estimators, the
simulated fleet's OpenMetrics."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import urllib.error
import urllib.parse

import numpy as np
import pytest

from flopwatch.errors import InputError
from flopwatch.fleet.aggregate import Accumulator
from flopwatch.fleet.estimators import disagree, verdict
from flopwatch.fleet.reader import ReadPlan, WindowBlock
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
    labels, values = c.query_values("x", 30)
    assert [x["UUID"] for x in labels] == ["GPU-1", "GPU-3"]  # GPU-2's NaN: no sample, named
    assert values.tolist() == [2.5, -7.0] and "NaN" in c.degradations[0]
    labels, values = c.query_values("y")
    assert labels == [] and values.shape == (0,)


def _block(t, series, values):
    return WindowBlock(
        t=np.asarray(t, float),
        labels=series,
        values={k: np.asarray(v, float) for k, v in values.items()},
        present=frozenset(),
    )


def test_counter_bridges_gaps_and_falls_back_to_power_on_reset():
    """One series at 300 W, scraped every 10 s at t = 5, 15, … 395 s (t = 125 missed), windows of 100 s; the
    counter (mJ) reads 300e3·t and restarts at t = 250 (a driver reload)."""
    lab = [{"UUID": "GPU-1", "pod": "p", "modelName": "NVIDIA H100 80GB HBM3"}]
    vals = {
        "e_first": [[1.5e6, 31.5e6, 3.0e6, 18.0e6]],  # window 3's minimum is after the reset
        "e_last": [[28.5e6, 58.5e6, 15.0e6, 45.0e6]],
        "e_resets": [[0, 0, 1, 0]],
        "e_n": [[10, 9, 10, 10]],
        "p_sum": [[3000, 2700, 3000, 3000]],
        "p_n": [[10, 9, 10, 10]],
    }
    acc = Accumulator(("pod",), 10.0, 100.0)
    acc.add(_block([100, 200], lab, {k: [v[0][:2]] for k, v in vals.items()}))  # two time chunks
    acc.add(_block([300, 400], lab, {k: [v[0][2:]] for k, v in vals.items()}))
    (job,) = acc.finish()
    # window 1: counter + half a step before the first sample; window 2 bridges the missed scrape; window 3
    # (reset) from power over the whole window (samples on both sides); window 4 from the counter again; half
    # a step after the last sample
    assert job.resets == 1
    assert job.energy_from_power_j == pytest.approx(300 * 100)
    assert job.energy_j == pytest.approx(300 * 400, rel=1e-12)
    assert job.duration_s == pytest.approx(400)
    assert job.covered_s == pytest.approx(390)  # one scrape missing
    assert (job.t_first, job.t_last) == (0, 400)


def test_series_without_the_group_label_are_unattributed():
    lab = [{"UUID": "GPU-1", "pod": ""}]
    acc = Accumulator(M.group_labels("pod"), 10.0, 100.0)
    acc.add(_block([100], lab, {"p_sum": [[1000]], "p_n": [[10]]}))
    assert acc.finish() == [] and acc.unattributed_j == pytest.approx(10000)
    assert M.group_labels("job") == ("hpc_job",) and M.group_labels("team") == ("team",)


def test_verdicts_and_disagreement():
    assert verdict(2e25, 3e25, 1e25) == "above"
    assert verdict(1e24, 5e24, 1e25) == "below"
    assert verdict(5e24, 2e25, 1e25) == "uncertain"
    assert verdict(1, 2, None) is None and verdict(math.nan, 1, 1) == "unknown"
    assert disagree(1e24, 2e24, 3e24, 4e24) and not disagree(1e24, 3e24, 2e24, 4e24)
    assert not disagree(math.nan, 1, 2, 3)


def test_builtin_power_inverse_is_monotone_and_bounded():
    from flopwatch.fleet.powerinv import power_inverse

    for dev in ("a100", "h100"):
        inv = power_inverse(dev, "bf16")
        rates = [inv.rate(p) for p in np.linspace(inv.idle_w, inv.max_w, 9)]
        mids = [r[0] for r in rates]
        assert all(b >= a for a, b in zip(mids, mids[1:], strict=False))
        assert all(lo <= mid <= hi <= inv.ceiling_flops for mid, lo, hi in rates)
        assert "MASCOTS" in inv.source


def test_bundled_power_lines_equal_a_fresh_fit(tmp_path):
    """The fits power_inverse reads from the package are what the bundled MASCOTS data give now (stale file: run
    ``python -m flopwatch.fleet.powerinv``), and every GPU the model templates from is in it."""
    import json

    from flopwatch.fleet.powerinv import LINES_FILE, TEMPLATE, fit_lines, write_lines
    from flopwatch.powermodel.mfu import GPU_DEVICE_KEYS

    table = json.loads(LINES_FILE.read_text())
    assert set(table) == set(GPU_DEVICE_KEYS) | {TEMPLATE}
    for gpu, lines in table.items():
        fresh = json.loads(json.dumps(fit_lines(gpu)))  # the same float → text → float round trip
        assert lines == fresh, gpu
    assert json.loads(write_lines(tmp_path / "lines.json").read_text()) == table


def test_power_inverse_refits_when_the_bundled_file_lacks_a_gpu(monkeypatch, tmp_path):
    from flopwatch.fleet import powerinv

    (tmp_path / "empty.json").write_text("{}")
    monkeypatch.setattr(powerinv, "LINES_FILE", tmp_path / "empty.json")
    powerinv._lines.cache_clear()
    powerinv.power_inverse.cache_clear()
    try:
        refit = powerinv.power_inverse("h100", "bf16")
    finally:
        powerinv._lines.cache_clear()
        powerinv.power_inverse.cache_clear()
    assert refit == powerinv.power_inverse("h100", "bf16")


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
    from flopwatch.fleet.localprom import free_port

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
    from flopwatch.fleet.localprom import backfill, find_tool

    if find_tool("promtool"):
        backfill(out, tmp_path / "tsdb")  # what the command promises: promtool accepts it
        assert any((tmp_path / "tsdb").iterdir())


class _Router:
    """Transport double for requests sent concurrently: the DCGM metric names from a list, then whatever
    ``dcgm_names`` holds; the server's version; no flopwatch rule names."""

    def __init__(self, dcgm_names):
        self.dcgm_names = dcgm_names
        self.requests = []

    def open(self, req, timeout):
        self.requests.append(req)
        url = urllib.parse.unquote(req.full_url + "?" + (req.data or b"").decode())
        if "buildinfo" in url:
            a = {"status": "success", "data": {"version": "2.42.0"}}
        elif '__name__=~"DCGM_FI_.*"' in url:  # the metric names (the rule names match flopwatch…:DCGM_FI_)
            a = {"status": "success", "data": self.dcgm_names}
        else:
            a = {"status": "success", "data": []}
        return io.BytesIO(json.dumps(a).encode())


def test_missing_energy_metrics_is_a_clear_error():
    from flopwatch.fleet.reader import FleetReader

    c = PrometheusClient("prom:9090", opener=_Router(["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_SM_CLOCK"]))
    with pytest.raises(InputError, match="missing metrics: neither DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
        FleetReader(c, ReadPlan(0, 3600)).discover()
    c = PrometheusClient("prom:9090", opener=_Router([]))
    with pytest.raises(InputError, match="empty result"):
        FleetReader(c, ReadPlan(0, 3600)).discover()


@pytest.mark.parametrize("clock", [True, False])
def test_job_level_pipes_give_the_per_gpu_jobs_answer(clock: bool) -> None:
    """A group's pipe estimate, SM activity, power limit, other-pipe note and dtype from its job-level sums (the
    job-level rules) equal what its GPU-jobs give one by one: the pipe estimator is linear in the sums."""
    from flopwatch.fleet.aggregate import GpuJob
    from flopwatch.fleet.estimate import _add_job, _close, _new_group
    from flopwatch.fleet.joblevel import JobPipes

    rng = np.random.default_rng(7)
    jobs = []
    for i in range(5):
        j = GpuJob(
            group="train", gpu=f"GPU-{i}", labels={"modelName": "NVIDIA H100 80GB HBM3", "UUID": f"GPU-{i}"}
        )
        j.energy_j, j.covered_s, j.duration_s = 3.6e6 * (1 + i / 10), 3600.0, 3600.0
        j.t_first, j.t_last, j.counter_s = 0.0, 3600.0, 3600.0
        j.busy_s, j.busy_covered_s = 3000.0 + 100 * i, 3600.0
        j.sm_active_s = 2500.0 + 50 * i
        j.tensor_a, j.tensor_covered_s = float(rng.uniform(1000, 3000)), 3600.0
        j.fp32_a, j.fp32_covered_s = float(rng.uniform(10, 100)), 3600.0
        if clock:
            f = float(rng.uniform(1500, 1980))
            j.tensor_af, j.fp32_af = j.tensor_a * f, j.fp32_a * f
            j.clock_mhz_s, j.clock_covered_s = f * 3600, 3600.0
        j.other_pipes_s = {"fp64": 5.0 * i}
        j.power_limit_w = 700.0 - 50 * (i % 2)
        jobs.append(j)
    per_gpu = _new_group("train")
    for j in jobs:
        _add_job(per_gpu, j, frozenset(), None, None, None)
    sums = {
        "tensor_a": sum(j.tensor_a for j in jobs),
        "fp32_a": sum(j.fp32_a for j in jobs),
        "sm_a": sum(j.sm_active_s for j in jobs),
        "fp64_a": sum(j.other_pipes_s["fp64"] for j in jobs),
        "plimit_max": max(j.power_limit_w for j in jobs),
        "plimit_min": min(j.power_limit_w for j in jobs),
    }
    if clock:
        sums |= {"tensor_af": sum(j.tensor_af for j in jobs), "fp32_af": sum(j.fp32_af for j in jobs)}
    pipes = {"train": {"NVIDIA H100 80GB HBM3": JobPipes(sums)}}
    job_level = _new_group("train")
    for j in jobs:  # what span resolution reads per GPU with job-level rules: no pipes, clock, SM, limit
        bare = GpuJob(**{**j.__dict__, "other_pipes_s": {}})
        for k in ("tensor_a", "tensor_af", "tensor_covered_s", "fp32_a", "fp32_af", "fp32_covered_s"):
            setattr(bare, k, 0.0)
        bare.sm_active_s, bare.clock_mhz_s, bare.clock_covered_s, bare.power_limit_w = 0.0, 0.0, 0.0, math.nan
        _add_job(job_level, bare, frozenset(), None, None, None, pipes)
    a = _close(per_gpu, 1e20)
    b = _close(job_level, 1e20, (pipes["train"], None, None, None))
    for k in ("pipe_estimate_flops", "pipe_lower_flops", "pipe_upper_flops", "mean_sm_active"):
        assert b[k] == pytest.approx(a[k], rel=1e-12), k
    for k in (
        "estimate_flops",
        "lower_flops",
        "upper_flops",
        "energy_j",
        "verdict",
        "pipe_verdict",
        "dtypes",
    ):
        assert b[k] == a[k], k
    assert (b["power_limit_w"], b["missing"], b["notes"]) == (a["power_limit_w"], a["missing"], a["notes"])
    assert any("fp64 pipe active" in n for n in b["notes"])
    assert clock or any("SM_CLOCK" in m for m in b["missing"])
    # a group the job-level rules know nothing of: no pipe estimate, and it says so
    empty = _new_group("other")
    _add_job(empty, jobs[0], frozenset(), None, None, None, {})
    c = _close(empty, None, ({}, None, None, None))
    assert c["pipe_estimate_flops"] is None and "pipe activity (no pipe estimate)" in c["missing"]


def test_batched_gpu_job_estimates_equal_one_at_a_time() -> None:
    """The built-in model's per-GPU-job estimates in one numpy pass (PowerInverse.rates, estimate_gpu_jobs) equal
    the scalar path exactly: powers from idle to past the board limit, low and unknown utilisation, no samples."""
    from flopwatch.devices import get_device
    from flopwatch.fleet.aggregate import GpuJob
    from flopwatch.fleet.estimators import estimate_gpu_job, estimate_gpu_jobs
    from flopwatch.fleet.powerinv import power_inverse

    rng = np.random.default_rng(11)
    for dev, dtype in (("h100", "bf16"), ("a100", "fp32"), ("l4", "fp16"), ("h200", "tf32")):
        spec, inv = get_device(dev), power_inverse(dev, dtype)
        p = np.concatenate([rng.uniform(-20, 1.3 * inv.max_w, 300), [math.nan, inv.idle_w, inv.max_w]])
        mid, lo, hi = inv.rates(p)
        for i, x in enumerate(p):
            want = inv.rate(float(x))
            assert all(
                a == b or (a != a and b != b) for a, b in zip(want, (mid[i], lo[i], hi[i]), strict=True)
            )
        jobs = []
        for i in range(200):
            t = float(rng.choice([0.0, 15.0, 3600.0, rng.uniform(30, 86400)]))
            j = GpuJob(group="g", gpu=f"GPU-{i}", labels={}, duration_s=t, covered_s=t * rng.uniform(0.5, 1))
            j.energy_j = t * rng.uniform(0.5, 1.4) * inv.max_w
            j.busy_covered_s = float(rng.choice([0.0, j.covered_s]))
            j.busy_s = j.busy_covered_s * rng.uniform(0.3, 1.0)
            j.tensor_a, j.tensor_covered_s = t * rng.uniform(0, 1), t * float(rng.integers(0, 2))
            j.tensor_af = j.tensor_a * rng.uniform(0, 1980)
            jobs.append(j)
        for pipes in (True, False):
            batch = estimate_gpu_jobs(jobs, spec, dtype, None, pipes=pipes)
            one = [estimate_gpu_job(j, spec, dtype, None, pipes=pipes) for j in jobs]
            for a, b in zip(batch, one, strict=True):  # NaN where an estimator had nothing: equal here
                ta, tb = dataclasses.astuple(a), dataclasses.astuple(b)
                assert all(x == y or (x != x and y != y) for x, y in zip(ta, tb, strict=True)), (a, b)


@pytest.mark.parametrize("seed", range(4))
def test_fold_on_arrays_equals_one_gpu_job_at_a_time(seed: int) -> None:
    """Span resolution with the job-level pipes folds a chunk's GPU-jobs on arrays (estimate._fold_arrays): the same
    groups as _add_job one GPU-job at a time — sums, bounds, notes, missing metrics, devices, dtypes — on GPU-jobs
    below the utilisation gate, without utilisation, without samples, from power only, and of an unknown model."""
    from flopwatch.fleet.aggregate import GpuJob
    from flopwatch.fleet.estimate import _add_job, _close, _fold_arrays, _new_group
    from flopwatch.fleet.joblevel import JobPipes

    rng = np.random.default_rng(seed)
    models = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Mystery GPU 9000"]
    jobs = []
    for i in range(400):
        group = f"job-{int(rng.integers(0, 40))}"
        model = models[int(rng.integers(0, 3))] if rng.random() < 0.15 else models[int(i % 40 < 30)]
        j = GpuJob(group=group, gpu=f"GPU-{int(rng.integers(0, 64))}", labels={"modelName": model})
        dur = float(rng.choice([0.0, rng.uniform(15, 7200)], p=[0.03, 0.97]))
        j.duration_s, j.covered_s = dur, dur * float(rng.uniform(0.9, 1.0))
        j.energy_j = dur * float(rng.uniform(80, 750))
        j.t_first = float(rng.uniform(0, 86400))
        j.t_last = j.t_first + dur
        j.counter_s = j.covered_s if rng.random() < 0.9 else 0.0
        j.energy_from_power_j = 0.0 if j.counter_s > 0 else j.energy_j
        j.resets = int(rng.random() < 0.05)
        if rng.random() < 0.9:  # else: no utilisation
            j.busy_covered_s = j.covered_s
            j.busy_s = j.covered_s * float(rng.uniform(0.3, 1.0))
        jobs.append(j)
    pipes = {
        f"job-{k}": {
            m: JobPipes({"tensor_a": float(rng.uniform(0, 9e3)), "fp32_a": float(rng.uniform(0, 9e3))})
            for m in models
        }
        for k in range(40)
    }
    one, arrays = {}, {}
    for j in jobs:
        _add_job(one.setdefault(j.group, _new_group(j.group)), j, frozenset(), None, None, None, pipes)
    for part in (jobs[:150], jobs[150:]):  # two chunks
        _fold_arrays(arrays, part, None, None, pipes)
    assert one.keys() == arrays.keys()
    for k in one:
        a = _close(one[k], 1e18, (pipes[k], None, None, None))
        b = _close(arrays[k], 1e18, (pipes[k], None, None, None))
        assert a.keys() == b.keys()
        for f, x in a.items():
            if isinstance(x, float):
                assert b[f] == pytest.approx(x, rel=1e-12, abs=1e-9), (k, f)
            else:
                assert b[f] == x, (k, f)
