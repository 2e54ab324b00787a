"""Round 8 red team on the fleet wing (the threat model's "Round 9 (fleet)"): what the other side controls may widen
a bound, block "below" or be refused with one line, never tighten a bound.

The harness of round 5 (``test_round5_fleet.py``): hand-written (SIMULATED) histories of H100s for 2 h at 15 s,
backfilled with promtool into a real Prometheus on loopback, each family on its own day, judged with
``--verifier-operated``. The honest job runs its tensor pipe 55 % of the cycles at the maximum clock: in fp8
7.8e18 issued FLOPs (at least 7e18 useful), so a threshold of 6.5e18 is under the truth and every "below" is wrong.
"""

from __future__ import annotations

import pytest
import test_round5_fleet as r5  # the round-5 harness (a module attribute: its tests are not collected twice)

from flopwatch.telemetry import dcgm_metrics as M
from prom_helpers import find_tool

pytestmark = pytest.mark.skipif(
    find_tool("promtool") is None or find_tool("prometheus") is None,
    reason="needs promtool and prometheus (Debian package 'prometheus')",
)

UNDER_TRUTH = "6.5e18"
K = r5.K
BUSY, IDLE = r5.BUSY, r5.IDLE
MIG_IDLE = {**BUSY, M.GR_ACTIVE: 0.0, M.TENSOR: 0.0, M.FP32: 0.0}  # an idle instance of a busy GPU


def _hmma(d: dict[str, float], hmma: float | None = None) -> dict[str, float]:
    """The readings of a Hopper exporter configured for HMMA only (``hmma``: its value; default TENSOR's)."""
    d = dict(d)
    v = d.pop(M.TENSOR)
    d[M.HMMA] = v if hmma is None else hmma
    return d


def _without(d: dict[str, float], metric: str) -> dict[str, float]:
    return {m: v for m, v in d.items() if m != metric}


def _families():
    busy = lambda k: BUSY[M.POWER]  # noqa: E731
    return {
        "honest": [r5._series(0, r5._lab("S0"), lambda k: BUSY)],
        # honest mixed fleet: one GPU's exporter reports TENSOR only, another's HMMA only (both busy)
        "hmma-mixed": [
            r5._series(0, r5._lab("S1a"), lambda k: BUSY),
            r5._series(0, r5._lab("S1b", Hostname="h1"), lambda k: _hmma(BUSY)),
        ],
        # both fields exported; the job's tensor work is in TENSOR, HMMA (one precision class of it) reads 0.05
        "hmma-under-tensor": [r5._series(0, r5._lab("S2"), lambda k: {**BUSY, M.HMMA: 0.05})],
        # a busy GPU whose exporter has no power gauge (its counter counts), beside an idle GPU with one
        "no-power-gauge": [
            r5._series(0, r5._lab("S3a", pod="idle"), lambda k: IDLE),
            r5._series(0, r5._lab("S3b", Hostname="h1"), lambda k: _without(BUSY, M.POWER), busy),
        ],
        # three MIG instances of one busy GPU (each repeating its power and counter); the exporter stops 12.5 min
        # before the range ends while the GPU works on
        "mig-lag-end": [
            r5._series(0, r5._lab("S4", f"p{i}", GPU_I_ID=str(i)), lambda k, i=i: (BUSY if i == 1 else MIG_IDLE)
                       if k < K - 50 else None, busy) for i in (1, 2, 3)
        ],
        # MIG instances whose exporter misses 3 of 4 scrapes in the first 30 min (the GPU busy throughout)
        "mig-sparse-edge": [
            r5._series(0, r5._lab("S5", f"p{i}", GPU_I_ID=str(i)), lambda k, i=i: None if k < 120 and k % 4
                       else (BUSY if i == 1 else MIG_IDLE), busy) for i in (1, 2)
        ],
        # round 7's mig-beside-whole: idle MIG "instances" repeating the whole GPU's power and counter
        "mig-beside-whole": [
            r5._series(0, r5._lab("S6"), lambda k: BUSY),
            *(r5._series(0, r5._lab("S6", f"decoy{i}", GPU_I_ID=str(i)), lambda k: MIG_IDLE, busy) for i in (1, 2)),
        ],
        # the power gauge stops at an idle moment 30 min in; the counter and the activities go on, the GPU busy
        "power-stops-idle": [
            r5._series(0, r5._lab("S7"), lambda k: IDLE if k < 120 else _without(BUSY, M.POWER),
                       lambda k: 75.0 if k < 120 else 650.0)
        ],
        # the same with the counter's series relabelled (no pod) once the gauge stops
        "power-stops-relabel": [
            r5._series(0, r5._lab("S8"), lambda k: IDLE if k < 120 else None, lambda k: 75.0 if k < 120 else 650.0),
            r5._series(0, r5._lab("S8", pod=None), lambda k: None if k < 120 else _without(BUSY, M.POWER),
                       lambda k: 75.0 if k < 120 else 650.0),
        ],
        # two exporters of one GPU on alternate scrapes, the second under-reporting (60 W, its own counter)
        "sensor-twins": [
            r5._series(0, r5._lab("S9", instance="a:9400"), lambda k: None if k % 2 else BUSY),
            r5._series(0, r5._lab("S9", instance="b:9400"), lambda k: {**MIG_IDLE, M.POWER: 60.0} if k % 2
                       else None, lambda k: 60.0, e0=1e9),
        ],
        # round 5's two exporters, the decoy pod on 1 of 5 (or 10) scrapes claiming 700 W, idle activity
        **{f"twin-{n}": [
            r5._series(0, r5._lab(f"S1{n}", instance="a"), lambda k, n=n: None if k % n == 0 else BUSY, busy),
            r5._series(0, r5._lab(f"S1{n}", "decoy", instance="b"), lambda k, n=n: {**MIG_IDLE, M.POWER: 700.0}
                       if k % n == 0 else None, busy),
        ] for n in (5, 10)},
        # the same decoy (1 of 5) with a flat counter inside the GPU's range: a stretch of no energy "inside" train's
        "twin-flat": [
            r5._series(0, r5._lab("S16", instance="a"), lambda k: None if k % 5 == 0 else BUSY, busy),
            r5._series(0, r5._lab("S16", "decoy", instance="b"), lambda k: {**MIG_IDLE, M.POWER: 700.0}
                       if k % 5 == 0 else None, lambda k: 0.0, e0=5e9 + 650e3 * 15 * (K // 2)),
        ],
    }  # fmt: skip


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with r5.served(tmp_path_factory.mktemp("round8"), _families()) as got:
        yield got


def _clean(rows):
    return [[n for n in g["notes"] if not n.startswith("no calibration")] for g in rows]


def test_honest_control_is_over_the_threshold_with_no_note(prom, capsys):
    _, rows = r5._fleet(capsys, prom, "honest", threshold=UNDER_TRUTH)
    assert all(g["verdict"] == "uncertain" and g["upper_flops"] > 7e18 for g in rows)
    assert _clean(rows) == [[]] * len(rows)


@pytest.mark.parametrize("chunk", ["256", "1"])
def test_an_honest_fleet_mixing_tensor_and_hmma_exporters_keeps_every_pipe_bound(prom, capsys, chunk):
    """`hmma-mixed` (honest): HMMA stood in for TENSOR fleet-wide wherever any GPU reported it, so the GPU whose
    exporter reports TENSOR only lost its pipe bound ("profiling counters missing", at peak). Both are read per
    window, the larger where both exist (each a view of the one tensor pipe): no note, each GPU's honest bound."""
    doc, rows = r5._fleet(capsys, prom, "hmma-mixed", "--gpus-per-chunk", chunk, threshold=UNDER_TRUTH)
    _, honest = r5._fleet(capsys, prom, "honest", threshold=UNDER_TRUTH)
    assert _clean(rows) == [[]] * len(rows)
    for g in rows:  # one pod of two GPUs: twice the honest GPU's bound
        assert g["verdict"] == "uncertain"
        assert g["upper_flops"] == pytest.approx(2 * honest[0]["upper_flops"], rel=1e-3)


def test_tensor_work_outside_hmma_is_not_lost(prom, capsys):
    """`hmma-under-tensor`: where both fields exist only HMMA was read, and HMMA counts one class of the tensor
    pipe's work (FP16/BF16/TF32), TENSOR all of it. A job whose tensor work HMMA does not count (0.05 of the cycles
    for TENSOR's 0.55): before, bound 7.4e17 (a tenth of the truth), kept from "below" 6.5e18 only by the built-in
    energy estimate's disagreement (no note where that model makes no statement). Now the larger of the two."""
    _, rows = r5._fleet(capsys, prom, "hmma-under-tensor", threshold=UNDER_TRUTH)
    _, honest = r5._fleet(capsys, prom, "honest", threshold=UNDER_TRUTH)
    for a, b in zip(rows, honest, strict=True):
        assert a["verdict"] == "uncertain" and a["upper_flops"] == pytest.approx(b["upper_flops"], rel=1e-6)


@pytest.mark.parametrize("by", ["pod", "node", "cohort"])
def test_a_gpu_without_a_power_gauge_is_read(prom, capsys, by):
    """`no-power-gauge`: the GPUs were listed from the power gauge's series (the energy counter's only where no GPU
    had a power gauge), and a GPU's samples were counted on the power gauge: a busy GPU whose exporter reports the
    counter and the activities but no power was in no chunk, no group and not in the fleet-wide total. Before: the
    fleet "below" 6.5e18 (bound 1.7e16, the idle GPU's) with no note (and a fleet with no power gauge at all had its
    sample counts scaled as mJ, 1e-3). Now GPUs are listed from both series and samples counted on the counter
    where the gauge is missing; without the gauge the checks of load cannot be made, so that is named."""
    doc, rows = r5._fleet(capsys, prom, "no-power-gauge", "--by", by, threshold=UNDER_TRUTH)
    fleet = doc["fleet"]
    assert fleet["gpus"] == 2 and fleet["verdict"] == "uncertain" and fleet["upper_flops"] > 7e18
    assert fleet["energy_j"] == pytest.approx((650.0 + 75.0) * K * r5.STEP, rel=0.01)
    busy = [g for g in doc["groups"] if g["upper_flops"] > 7e18]
    assert len(busy) == 1 and busy[0]["verdict"] == "uncertain" and busy[0]["gpus"] == 1
    r5._blocked([busy[0], fleet], f"{M.POWER} missing for 2.00 GPU-h")


@pytest.mark.parametrize("family", ["power-stops-idle", "power-stops-relabel"])
def test_counter_windows_without_power_samples_are_read_and_named(prom, capsys, family):
    """`power-stops-idle`: a series was there only where the power gauge counted samples, so when the gauge stopped
    at an idle moment (30 min in) the counter's and the activities' next 90 min of work were dropped: "below" 6.5e18
    (bound 5e16), no note; the same where the counter's series loses its pod label then (bound 4e15). Now a window
    where the counter has a sample is there, its energy the counter's, named as without the power gauge."""
    doc, rows = r5._fleet(capsys, prom, family, threshold="5e18")
    r5._blocked([doc["fleet"]], f"{M.POWER} missing for")
    assert doc["fleet"]["upper_flops"] > 5.8e18  # 90 min at 55 % of the fp8 tensor peak: 5.9e18 issued
    assert doc["fleet"]["energy_j"] == pytest.approx((75.0 * 120 + 650.0 * (K - 120)) * r5.STEP, rel=0.01)
    assert all(g["verdict"] != "below" for g in rows if g["upper_flops"] > 5e18)


@pytest.mark.parametrize("window", ["30m", "1h", "2h"])
@pytest.mark.parametrize("family", ["twin-5", "twin-10", "twin-flat"])
def test_a_decoy_exporter_on_a_few_scrapes_is_a_gpu_reported_twice(prom, capsys, family, window):
    """`twin-20`: two exporters of one GPU were named only where each had a quarter of a window's scrapes and spanned
    its counter range. A decoy pod on 1 of 5 scrapes claiming 700 W took a fifth of the GPU's time and energy: at
    ``--window 1h`` "train" read "below" 6.5e18 (bound 6.29e18) with no note. Now a series whose counter rose over
    more than its own time with no other series' stretch inside it (an honest A, B, A nests B in A) is one GPU
    reported twice, whatever its share of the scrapes; a decoy with a flat counter inside the GPU's range is no
    stretch that explains the energy around it (`twin-flat`)."""
    _, rows = r5._fleet(capsys, prom, family, "--window", window, threshold=UNDER_TRUTH)
    for (
        g
    ) in rows:  # (a flat decoy counter below the GPU's in a later window also reads as a reset: named too)
        assert g["verdict"] != "below" and any(
            "reported twice" in n or "counter reset" in n for n in g["notes"]
        )


@pytest.mark.parametrize("window", ["30m", "2h"])
def test_mig_telemetry_that_stops_under_load_in_the_last_window_is_named(prom, capsys, window):
    """`mig-lag-end`: the last window's check compared the GPU's time in it, summed over its series, with the
    range's end: three MIG instances of a GPU whose exporter stopped 12.5 min early summed to more than the window.
    Now the longest instance's time is compared (MIG instances repeat one GPU's timeline)."""
    _, rows = r5._fleet(capsys, prom, "mig-lag-end", "--window", window, threshold=UNDER_TRUTH)
    r5._blocked(rows, "stops under load before the range ends")


def test_mig_scrapes_missed_in_an_edge_window_are_unobserved_time(prom, capsys):
    """`mig-sparse-edge`: an edge window with missed scrapes stands for the time its counter rose at its mean power
    only where the GPU had one series in it: MIG instances (one series each, the same counter) kept their samples
    × the step (22 min of work in no duration). Now the rule holds per MIG instance."""
    _, rows = r5._fleet(capsys, prom, "mig-sparse-edge", "--window", "1h", threshold=UNDER_TRUTH)
    r5._blocked(rows, "telemetry covers only 82%")


def test_a_whole_gpu_series_beside_mig_decoys_keeps_its_energy(prom, capsys):
    """`mig-beside-whole` (round 7: named as a GPU reported twice): the idle MIG decoys still took two thirds of the
    whole GPU's energy from its job. Now the whole GPU's series share its energy among themselves only (the
    instances are apportioned apart: counted twice in the total, a wider bound, named)."""
    doc, rows = r5._fleet(capsys, prom, "mig-beside-whole", threshold=UNDER_TRUTH)
    r5._blocked(rows, "a GPU reported twice")
    train = next(g for g in doc["groups"] if g["key"] == "train")
    assert train["energy_j"] == pytest.approx(650.0 * K * r5.STEP, rel=0.01)


@pytest.mark.parametrize(
    ("hmma", "tensor", "want"), [(0.05, 0.55, 0.55), (0.4, 0.3, 0.4), (None, 0.55, 0.55)]
)
def test_the_prometheus_sensor_reads_the_larger_of_tensor_and_hmma(hmma, tensor, want):
    """`hmma-under-tensor` in the ``prometheus:`` sensor of ``monitor``/``record``: HMMA was preferred wherever it had
    a sample, so tensor work it does not count read as idle (0.05 for TENSOR's 0.55). Now the larger of the two."""
    from flopwatch.telemetry.sensors.base import VirtualClock
    from flopwatch.telemetry.sensors.prometheus import PrometheusSensor

    vals = {M.POWER: 650.0, M.TENSOR: tensor, **({M.HMMA: hmma} if hmma is not None else {})}
    history = {name: ([100.0, 115.0], [v, v]) for name, v in vals.items()}
    s = PrometheusSensor(None, "S7", clock=VirtualClock(t0=110.0), history=history, end=115.0)
    assert s.read().extra["tensor_util"] == want


@pytest.mark.parametrize("family", ["sensor-twins", "honest"])
def test_the_prometheus_sensor_refuses_two_exporters_of_one_gpu(prom, capsys, tmp_path, family):
    """`sensor-twins`: the ``prometheus:`` sensor merged every series of a GPU's metric in time order, so two
    exporters of one GPU on alternate scrapes (one claiming 60 W and its own counter) made one stream that
    alternated between them: ``monitor`` kept 0.38 of 4.67 MJ (8 %) with no implausible reading and no error. Power
    and the energy counter are the whole GPU's: their series may follow each other (a job change) or repeat each
    other (MIG), never interleave or disagree; now one line, exit 2. The honest GPU records as before."""
    from flopwatch.cli import main

    t0 = prom[1][family]
    spec = f"prometheus:{prom[0]}?start={t0:.0f}&end={t0 + 600:.0f}"
    out = tmp_path / "t.parquet"
    rc = main(
        ["record", "--sensor", spec, "--rate", "1", "--duration", "300", "--speed", "1000", "-o", str(out)]
    )
    err = capsys.readouterr().err
    if family == "honest":
        assert rc == 0 and out.exists(), err
        return
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "two exporters of one GPU" in err and (M.POWER in err or M.ENERGY in err)
