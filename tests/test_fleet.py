"""Fleet pieces without a Prometheus: times and selectors, the client's errors, window folding, estimators, the
simulated fleet's OpenMetrics."""

from __future__ import annotations

import io
import json
import math
import urllib.error

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
    (s,) = c.query_range("x", 10, 20, 10)
    assert s.labels == {"UUID": "GPU-1"} and s.t.tolist() == [10, 20] and s.v[0] == 1.5 and math.isnan(s.v[1])
    with pytest.raises(PrometheusError, match="11000"):
        c.query_range("x", 0, 1e6, 1)
    # several series are converted together and split back per series; empty ones are dropped
    many = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": {"UUID": "GPU-1"}, "values": [[10, "1"], [20, "2"], [30, "+Inf"]]},
                {"metric": {"UUID": "GPU-2"}, "values": []},
                {"metric": {"UUID": "GPU-3"}, "values": [[20, "-4.5e3"]]},
                {"metric": {"UUID": "GPU-4"}, "values": [[10, "oops"], [30, "7"]]},
            ],
        },
    }
    c = PrometheusClient("prom:9090", opener=_Opener([many]))
    a, b, d = c.query_range("x", 10, 30, 10)
    assert [x.labels["UUID"] for x in (a, b, d)] == ["GPU-1", "GPU-3", "GPU-4"]
    assert a.t.tolist() == [10, 20, 30] and a.v.tolist() == [1.0, 2.0, math.inf]
    assert b.t.tolist() == [20] and b.v.tolist() == [-4500.0]
    assert d.t.tolist() == [10, 30] and math.isnan(d.v[0]) and d.v[1] == 7.0


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


def test_missing_energy_metrics_is_a_clear_error():
    from flopwatch.fleet.reader import FleetReader

    names = {"status": "success", "data": ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_SM_CLOCK"]}
    c = PrometheusClient("prom:9090", opener=_Opener([names]))
    with pytest.raises(InputError, match="missing metrics: neither DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
        FleetReader(c, ReadPlan(0, 3600)).discover()
    c = PrometheusClient("prom:9090", opener=_Opener([{"status": "success", "data": []}]))
    with pytest.raises(InputError, match="empty result"):
        FleetReader(c, ReadPlan(0, 3600)).discover()
