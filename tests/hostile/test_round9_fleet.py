"""Round 9 red team on the fleet wing (the threat model's "Round 10 (fleet)"): what the other side controls may widen
a bound, block "below" or be refused with one line, never tighten a bound.

The harness of round 5 (``test_round5_fleet.py``): hand-written (SIMULATED) histories of H100s for 2 h at 15 s,
backfilled with promtool into a real Prometheus on loopback, each family on its own day. The honest job runs its
tensor pipe 55 % of the cycles at the maximum clock. Here: the ``prometheus:`` sensor of ``monitor``/``record``
against families that ``fleet estimate`` reads or names (round 5's `model-switch`, round 8's `no-uuid`, round 9's
`no-power-gauge` and `sensor-twins`, MIG), in history playback and live (a stand-in client)."""

from __future__ import annotations

import time

import pyarrow.parquet as pq
import pytest
import test_round5_fleet as r5  # the round-5 harness (a module attribute: its tests are not collected twice)

from flopwatch.telemetry import dcgm_metrics as M
from prom_helpers import find_tool

pytestmark = pytest.mark.skipif(
    find_tool("promtool") is None or find_tool("prometheus") is None,
    reason="needs promtool and prometheus (Debian package 'prometheus')",
)

K, BUSY, IDLE = r5.K, r5.BUSY, r5.IDLE
MIG_IDLE = {**BUSY, M.GR_ACTIVE: 0.0, M.TENSOR: 0.0, M.FP32: 0.0}  # an idle instance of a busy GPU
A100 = "NVIDIA A100-SXM4-80GB"  # sorts before "NVIDIA H100 …": the first series Prometheus answers


def _without(d: dict[str, float], metric: str) -> dict[str, float]:
    return {m: v for m, v in d.items() if m != metric}


def _families():
    half = K // 2
    busy = lambda k: BUSY[M.POWER]  # noqa: E731
    return {
        "honest": [r5._series(0, r5._lab("T0"), lambda k: BUSY)],
        # one GPU (one UUID) whose series claim two models: the H100 first, then a less capable A100
        "sensor-two-models": [
            r5._series(0, r5._lab("T1"), lambda k: BUSY if k < half else None, busy),
            r5._series(0, r5._lab("T1", model=A100), lambda k: BUSY if k >= half else None, busy,
                       e0=5e9 + 650e3 * r5.STEP * half),
        ],
        # a busy GPU whose exporter has no power gauge (its counter counts), beside an idle GPU with one
        "sensor-no-power-gauge": [
            r5._series(0, r5._lab("T2a", pod="idle"), lambda k: IDLE),
            r5._series(0, r5._lab("T2b", Hostname="h1"), lambda k: _without(BUSY, M.POWER), busy),
        ],
        # three MIG instances of one busy GPU (each repeating its power and counter); the work on the last instance
        "sensor-mig": [
            r5._series(0, r5._lab("T3", f"p{i}", GPU_I_ID=str(i)), lambda k, i=i: BUSY if i == 3 else MIG_IDLE, busy)
            for i in (1, 2, 3)
        ],
        # a busy GPU whose exporter sets no UUID label, beside an idle GPU with one
        "sensor-no-uuid": [
            r5._series(0, r5._lab("T4a", pod="idle"), lambda k: IDLE),
            r5._series(0, {k: v for k, v in r5._lab("", Hostname="h1").items() if k != "UUID"}, lambda k: BUSY),
        ],
        # a GPU whose UUID holds a quote and a backslash (OpenMetrics-escaped here: the value is T6"q\z)
        "sensor-uuid-quote": [r5._series(0, r5._lab(r'T6\"q\\z'), lambda k: BUSY)],
    }  # fmt: skip


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with r5.served(tmp_path_factory.mktemp("round9"), _families()) as got:
        yield got


def _record(prom, family, tmp_path, capsys, end_s=K * r5.STEP):
    from flopwatch.cli import main

    t0 = prom[1][family]
    spec = f"prometheus:{prom[0]}?start={t0:.0f}&end={t0 + end_s:.0f}"
    out = tmp_path / "t.parquet"
    rc = main(["record", "--sensor", spec, "--rate", "1", "--duration", f"{end_s:.0f}", "--speed", "1e6",
               "-o", str(out)])  # fmt: skip
    return rc, out, capsys.readouterr().err


def test_the_honest_gpu_records_as_before(prom, capsys, tmp_path):
    rc, out, err = _record(prom, "honest", tmp_path, capsys, end_s=600)
    assert rc == 0, err
    t = pq.read_table(out)
    assert set(t.column("device").to_pylist()) == {"T0"} and b"NVIDIA H100" in t.schema.metadata[b"flopwatch"]


def test_the_prometheus_sensor_refuses_a_gpu_claiming_two_models(prom, capsys, tmp_path):
    """`sensor-two-models` (round 5's `model-switch`, which ``fleet estimate`` names as "readings impossible for the
    claimed model A | B"): the sensor took its GPU's labels from the first power series Prometheus answered (sorted
    by labels), so an exporter that claims an A100 for half the run made the whole H100 trace an A100's ("NVIDIA
    A100-SXM4-80GB" sorts first), silently: judged with the A100's peak. A GPU has one model: now one line, exit 2."""
    rc, out, err = _record(prom, "sensor-two-models", tmp_path, capsys)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "T1 reports 2 models" in err and A100 in err and "H100" in err
    assert not out.exists()


def test_the_prometheus_sensor_reads_a_gpu_without_a_power_gauge(prom, capsys, tmp_path):
    """`sensor-no-power-gauge` (round 9's `no-power-gauge`, which ``fleet estimate`` now reads and names): the
    sensor listed GPUs from the power gauge's series only, so a busy GPU whose exporter reports the energy counter
    and the activities but no power was not recorded at all, silently: the trace held the idle GPU alone. Now GPUs
    are listed from the gauge or the counter; the busy GPU's energy is its counter's (650 W over the 2 h)."""
    rc, out, err = _record(prom, "sensor-no-power-gauge", tmp_path, capsys)
    assert rc == 0, err
    t = pq.read_table(out).to_pandas()
    assert set(t["device"]) == {"T2a", "T2b"}
    busy = t[t["device"] == "T2b"]
    assert busy["power_w"].isna().all()  # no gauge: none invented
    rise = busy["energy_j"].max() - busy["energy_j"].min()
    assert rise == pytest.approx(650.0 * (K - 1) * r5.STEP, rel=0.01)
    assert (busy["util"] == BUSY[M.GR_ACTIVE]).all()


def test_the_prometheus_sensor_reads_the_busy_mig_instance(prom, capsys, tmp_path):
    """`sensor-mig` (honest): a GPU's activities at one scrape were the first of its series Prometheus answered
    (sorted by labels), so a busy GPU whose work runs on its third MIG instance read the first, idle one: utilisation
    and tensor activity 0 at 650 W, the pipe bound lost. Each instance's activity is of its own share of the GPU, so
    the largest bounds the GPU's: now the largest at each scrape (a job change, one series at a time, unchanged)."""
    rc, out, err = _record(prom, "sensor-mig", tmp_path, capsys, end_s=600)
    assert rc == 0, err
    t = pq.read_table(out).to_pandas()
    assert (t["power_w"] == 650.0).all()
    assert (t["util"] == BUSY[M.GR_ACTIVE]).all() and (t["extra_tensor_util"] == BUSY[M.TENSOR]).all()


def test_the_prometheus_sensor_refuses_gpus_it_cannot_name(prom, capsys, tmp_path):
    """`sensor-no-uuid` (round 8's `no-uuid`, which ``fleet estimate`` reads by its empty value): the sensor listed
    GPUs by their UUID label, so a busy GPU whose exporter sets none was not recorded, silently: the trace held the
    idle GPU alone. The sensor names each GPU by UUID: now one line, exit 2 (``gpu=`` still picks a named GPU)."""
    rc, out, err = _record(prom, "sensor-no-uuid", tmp_path, capsys, end_s=600)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "without a UUID label" in err and not out.exists()


def _live(answer):
    """A ``prometheus:`` sensor read live from a stand-in client answering ``answer`` (series of raw samples)."""
    from types import SimpleNamespace

    from flopwatch.telemetry.sensors.prometheus import PrometheusSensor

    client = SimpleNamespace(query_matrix=lambda expr, at: answer, display_url="http://127.0.0.1:1")
    return PrometheusSensor(client, "T5")


def _raw(name, labels, ts, vs):
    from types import SimpleNamespace

    import numpy as np

    return SimpleNamespace(labels={"__name__": name, "UUID": "T5", **labels}, t=np.asarray(ts, float),
                           v=np.asarray(vs, float))  # fmt: skip


def test_the_live_prometheus_sensor_reads_the_busy_mig_instance():
    """`sensor-mig`, live (no ``start=``/``end=``): one instant answer, each series' value written over the last, so
    the last MIG instance answered (sorted by labels) stood for the GPU's activities. Now the lookback's raw samples
    are merged as history is: at the newest scrape, the largest."""
    ts = [time.time() - 40.0, time.time() - 25.0, time.time() - 10.0]
    acts = {"1": (BUSY[M.GR_ACTIVE], BUSY[M.TENSOR]), "2": (0.0, 0.0), "3": (float("nan"), 0.0)}
    answer = [_raw(M.POWER, {"GPU_I_ID": i}, ts, [650.0] * 3) for i in acts] + [
        s
        for i, (gr, tc) in acts.items()
        for s in (
            _raw(M.GR_ACTIVE, {"GPU_I_ID": i}, ts, [gr] * 3),
            _raw(M.TENSOR, {"GPU_I_ID": i}, ts, [tc] * 3),
        )
    ]
    r = _live(answer).read()
    assert r.power_w == 650.0 and r.util == BUSY[M.GR_ACTIVE] and r.extra["tensor_util"] == BUSY[M.TENSOR]


def test_the_live_prometheus_sensor_does_not_read_a_second_exporter():
    """`sensor-twins`, live (round 9's "not closed"): two current power series of one GPU, the instant answer's
    last one kept, so a second exporter claiming 60 W on alternate scrapes (sorted after the GPU's own) was the
    reading. Now interleaved series are a gap (the time blind, bounded at peak); a job change (the old series
    ended, the new one current, within the lookback) reads the new series' newest sample."""
    from flopwatch.errors import SensorError

    t0 = time.time() - 70.0  # samples of the last 70 s: current
    a = _raw(M.POWER, {"instance": "a"}, [t0, t0 + 30, t0 + 60], [650.0] * 3)
    b = _raw(M.POWER, {"instance": "b"}, [t0 + 15, t0 + 45], [60.0] * 2)
    with pytest.raises(SensorError, match="two exporters of one GPU"):
        _live([a, b]).read()
    old = _raw(M.POWER, {"pod": "idle"}, [t0, t0 + 15], [75.0] * 2)
    new = _raw(M.POWER, {"pod": "train"}, [t0 + 30, t0 + 45, t0 + 60], [650.0] * 3)
    assert _live([new, old]).read().power_w == 650.0


def test_the_live_prometheus_sensor_does_not_read_a_stopped_exporter():
    """A raw sample carries no staleness marker: an exporter that stopped 2 minutes ago (15 s scrapes) was read at
    its last sample for the whole 300 s lookback, live power that nothing measured. Its newest sample now counts only
    while no older than twice its scrape spacing: a stopped exporter is a failed reading, reported."""
    from flopwatch.errors import SensorError

    t0 = time.time() - 180.0
    gone = _raw(M.POWER, {}, [t0, t0 + 15, t0 + 30, t0 + 45, t0 + 60], [75.0] * 5)
    with pytest.raises(SensorError, match="no current dcgm-exporter sample"):
        _live([gone]).read()


def test_the_prometheus_sensor_reads_a_uuid_with_quotes(prom, capsys, tmp_path):
    """`sensor-uuid-quote`: the UUID went unescaped into the sensor's selector (``UUID="…"``), so a quote or a
    backslash in it broke the query. Now escaped as a PromQL string: the GPU is read."""
    rc, out, err = _record(prom, "sensor-uuid-quote", tmp_path, capsys, end_s=600)
    assert rc == 0, err
    t = pq.read_table(out).to_pandas()
    assert set(t["device"]) == {'T6"q\\z'} and (t["power_w"] == 650.0).all()
