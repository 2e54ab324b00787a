"""Round 5: families of hostile dcgm-exporter / job-info series nobody listed, against ``fleet estimate``.

An operator controls what the exporters report: labels, which series exist, when they vanish, the job-info series.
Each family is a hand-written (SIMULATED) history of one H100 for 2 h at 15 s, backfilled with promtool into a real
Prometheus on loopback, each family on its own day. The truth is one honest job the whole time; each lie must end in
a named note on the group and no "below" (threshold 1e18: the lie's bound is under it, the truth's over it).
"""

from __future__ import annotations

import contextlib
import json

import pytest

from flopwatch.telemetry import dcgm_metrics as M
from prom_helpers import LocalPrometheus, backfill, find_tool

pytestmark = pytest.mark.skipif(
    find_tool("promtool") is None or find_tool("prometheus") is None,
    reason="needs promtool and prometheus (Debian package 'prometheus')",
)

H100, L40 = "NVIDIA H100 80GB HBM3", "NVIDIA L40"
W0, DAY, STEP, K = 1_700_000_000.0, 86400.0, 15.0, 480  # 2 h of 15 s scrapes per family
BUSY = {
    M.POWER: 650.0,
    M.GR_ACTIVE: 0.95,
    M.TENSOR: 0.55,
    M.FP32: 0.02,
    M.FP16: 0.0,
    M.FP64: 0.0,
    M.SM_CLOCK: 1980.0,
}
IDLE = {**BUSY, M.POWER: 75.0, M.GR_ACTIVE: 0.0, M.TENSOR: 0.0, M.FP32: 0.0}
THRESHOLD = "1e18"


def _series(t0, labels, emit, true_w=None, e0=5e9):
    """One series: ``emit(k)`` the metrics reported at scrape ``k`` (None: no sample); the energy counter (mJ)
    counts ``true_w(k)`` (default: the reported power), as the GPU's own counter does whatever is reported."""
    rows, e = [], e0
    for k in range(K):
        d = emit(k)
        e += (true_w(k) if true_w else (d or {}).get(M.POWER, 0.0)) * 1e3 * STEP
        rows.append(None if d is None else {**d, M.ENERGY: e})
    return t0, labels, rows


def _info(t0, labels, held):
    """A Slurm-style job-info series: 1 at every scrape where ``held(k)``."""
    return t0, labels, [{"slurm_job_info": 1.0} if held(k) else None for k in range(K)]


def _om(all_series) -> str:
    fam: dict[str, dict[str, list[str]]] = {}
    for t0, labels, rows in all_series:
        ls = ",".join(f'{a}="{b}"' for a, b in labels.items())
        for k, d in enumerate(rows):
            for m, v in (d or {}).items():
                fam.setdefault(m, {}).setdefault(ls, []).append(f"{m}{{{ls}}} {v:.10g} {t0 + STEP * k:.3f}")
    out = []
    for m, by in fam.items():
        out.append(f"# TYPE {m} {'unknown' if m == M.ENERGY else 'gauge'}")
        out += [line for lines in by.values() for line in lines]
    return "\n".join(out) + "\n# EOF\n"


def _lab(uuid, pod="train", model=H100, **kw):
    return {
        "UUID": uuid,
        "gpu": "0",
        "Hostname": "h0",
        "modelName": model,
        **({"pod": pod} if pod else {}),
        **kw,
    }


def _families():
    """name → its series (each family on day i after W0, in this order)."""
    h340 = {**BUSY, M.POWER: 340.0, M.SM_CLOCK: 2300.0}  # an H100 capped at 340 W: a power an L40 can draw
    half = K // 2
    busy = lambda k: BUSY[M.POWER]  # noqa: E731
    gap = lambda k: K // 4 <= k < 3 * K // 4  # noqa: E731
    return {
        "honest": [_series(0, _lab("G0"), lambda k: BUSY)],
        # modelName changes mid-run (a new series): the second half claims a less capable L40
        "model-switch": [
            _series(0, _lab("G1"), lambda k: h340 if k < half else None, lambda k: 340.0),
            _series(0, _lab("G1", model=L40), lambda k: h340 if k >= half else None, lambda k: 340.0),
        ],
        # the exporter is down for the busy hour (the counter keeps counting): seen only idle, before and after
        "outage": [
            _series(0, _lab("G2"), lambda k: None if gap(k) else IDLE, lambda k: 700.0 if gap(k) else 75.0)
        ],
        # the same without the energy counter: nothing bridges the hour
        "outage-no-counter": [
            (0, _lab("G3"), [None if gap(k) else IDLE for k in range(K)]),
        ],
        # two exporters report the GPU under two instance labels on alternate scrapes (together: one scrape rate);
        # the decoy pod's copy claims more of the power (800 W vs 500 W), so "train" keeps 38 % of the GPU's energy
        "two-exporters": [
            _series(
                0, _lab("G4", instance="a:9400"), lambda k: None if k % 2 else {**BUSY, M.POWER: 500.0}, busy
            ),
            _series(
                0,
                _lab("G4", "decoy", instance="b:9400"),
                lambda k: {**BUSY, M.POWER: 800.0} if k % 2 else None,
                busy,
            ),
        ],
        # no job label on the DCGM series; the job-info series says a second job held the GPU the whole time too
        "two-jobs": [
            _series(0, _lab("G5", pod=None), lambda k: BUSY),
            _info(0, {"job": "train", "Hostname": "h0", "gpu": "0"}, lambda k: True),
            _info(0, {"job": "ghost", "Hostname": "h0", "gpu": "0"}, lambda k: True),
        ],
        # an honest 650 W but tensor activity scaled to 0.23: a pipe bound just over the calibrated estimate
        "pipes-under": [_series(0, _lab("G6"), lambda k: {**BUSY, M.TENSOR: 0.23, M.FP32: 0.0})],
        # scraped every 30 s while the plan assumes 15 s (--step): half the samples it expects
        "scrape-30s": [_series(0, _lab("G7"), lambda k: None if k % 2 else BUSY, busy)],
        # one UUID on two hosts (two busy GPUs), each scraped every 30 s: together one GPU's scrape rate
        "uuid-two-hosts": [
            _series(0, _lab("G8"), lambda k: None if k % 2 else BUSY, busy),
            _series(0, _lab("G8", Hostname="h1"), lambda k: BUSY if k % 2 else None, busy, e0=9e11),
        ],
        # the job's pod label changes mid-run: each pod holds half of it
        "moved-pod": [
            _series(0, _lab("G9"), lambda k: BUSY if k < half else None, busy),
            _series(
                0,
                _lab("G9", "train-b"),
                lambda k: BUSY if k >= half else None,
                busy,
                e0=5e9 + 650e3 * STEP * half,
            ),
        ],
        # a driver reload 7.5 min in (the first window), with a new pod series: its counter restarts from 0
        "reset-first-window": [
            _series(0, _lab("G10", "pre"), lambda k: BUSY if k < 30 else None, busy),
            _series(0, _lab("G10"), lambda k: BUSY if k >= 30 else None, busy, e0=-650e3 * STEP * 29),
        ],
        # busy (graphics engine 95 %) for two hours at 72 W, within 5 % of the H100's 70 W idle, no pipe activity
        "util-no-power": [
            _series(0, _lab("G11"), lambda k: {**BUSY, M.POWER: 72.0, M.TENSOR: 0.0, M.FP32: 0.0})
        ],
        # honest MIG: two instances, each repeating the whole GPU's power and counter at every scrape
        "mig": [_series(0, _lab("G12", f"p{i}", GPU_I_ID=str(i)), lambda k: BUSY) for i in (1, 2)],
    }


@contextlib.contextmanager
def served(d, fams):  # noqa: ANN001, ANN201
    """The families (name → series) one simulated day apart, backfilled under ``d`` and served by a real Prometheus
    on loopback: (its URL, each family's day start). Every fleet round's fixture."""
    shifted = [(W0 + i * DAY + t0, lab, rows) for i, ss in enumerate(fams.values()) for t0, lab, rows in ss]
    (d / "f.om").write_text(_om(shifted))
    backfill(d / "f.om", d / "tsdb")
    with LocalPrometheus(d / "tsdb") as p:
        yield p.url, {name: W0 + i * DAY for i, name in enumerate(fams)}


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with served(tmp_path_factory.mktemp("round5"), _families()) as got:
        yield got


def _fleet(capsys, prom, family, *extra, threshold=THRESHOLD, url=None, rc=0, operated=True):
    """The verifier runs this Prometheus (--verifier-operated), so the data checks themselves are what is tested."""
    from flopwatch.cli import main

    verifier = ["--verifier-operated"] if operated else []
    url, day = url or prom[0], prom[1]
    got = main(["fleet", "estimate", "--prometheus", url, "--start", f"{day[family]:.0f}",
               "--end", f"{day[family] + K * STEP:.0f}", "--window", "30m", "--threshold", threshold,
               "--retries", "0", "--timeout", "30", "--no-progress", "--json", *verifier, *extra])  # fmt: skip
    out, err = capsys.readouterr()
    assert got == rc, err
    if rc:
        assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
        return err, []
    doc = json.loads(out)
    return doc, [*doc["groups"], doc["fleet"]]


def _blocked(rows, fragment):
    """Every row names ``fragment`` in its notes and none is "below"."""
    for g in rows:
        assert g["verdict"] in ("uncertain", "above"), g
        assert any(fragment in n for n in g["notes"]), (fragment, g["notes"])


def test_honest_control_has_no_notes_and_is_not_below(prom, capsys):
    _, rows = _fleet(capsys, prom, "honest")
    for g in rows:
        assert g["verdict"] == "uncertain" and g["coverage"] == 1.0
        assert [n for n in g["notes"] if not n.startswith("no calibration")] == [], g["notes"]


def test_honest_series_from_the_operators_prometheus_are_never_below(prom, capsys):
    """`scaled-together`: power, energy counter and pipe activity scaled down together look like a lighter job,
    consistent in every check. Data the operator can rewrite makes no certificate: without --verifier-operated
    every group is blocked, named, and the text output says why in its header."""
    _, rows = _fleet(capsys, prom, "honest", operated=False)
    _blocked(rows, "series from the operator's Prometheus")
    _, trusted = _fleet(capsys, prom, "honest")
    assert [g["upper_flops"] for g in rows] == [g["upper_flops"] for g in trusted]
    doc, _ = _fleet(capsys, prom, "honest", operated=False)
    assert doc["series_from"] == "the operator's Prometheus"


def test_model_name_changing_within_one_gpu_is_impossible_and_bounded_as_the_most_capable(prom, capsys):
    """Before: the GPU-job took one series' modelName (the L40), bound 6.8e17 < 1e18: "below", no note."""
    _, rows = _fleet(capsys, prom, "model-switch")
    _blocked(rows, "impossible for the claimed model NVIDIA H100 80GB HBM3 | NVIDIA L40")
    assert all(g["devices"] == ["h100"] and g["upper_flops"] > 1e18 for g in rows)


@pytest.mark.parametrize("family", ["outage", "outage-no-counter"])
def test_a_gpu_missing_between_samples_is_unobserved_time_at_peak_rate(prom, capsys, family):
    """Before: the missing hour was in no duration: coverage 100 %, bound 8.5e15 from the idle hour's pipes (only an
    incidental note kept it from "below"). Now the hour is unobserved: coverage ~50 %, bounded at peak rate."""
    _, rows = _fleet(capsys, prom, family)
    _blocked(rows, "telemetry covers only 50% of the run")
    assert all(g["upper_flops"] >= 3600 * 989e12 for g in rows)  # the hour at the H100's dense bf16 peak


def test_two_series_of_one_gpu_at_once_are_named_and_never_below(prom, capsys):
    """Before: the pods split the counter's energy by the reported power: "train" kept 1.8 of 4.7 MJ, no note.
    Now: each series spans its window's whole counter range with half the scrapes (one counter, one timeline: two
    series of it follow each other): the GPU is reported twice."""
    doc, rows = _fleet(capsys, prom, "two-exporters")
    _blocked(rows, "a GPU reported twice for")
    assert doc["fleet"]["energy_j"] == pytest.approx(650.0 * K * STEP, rel=0.01)


def test_one_gpu_held_by_two_jobs_at_once_is_named_and_never_below(prom, capsys, tmp_path):
    """Before: the info series (or a mapping file) giving the GPU to a second job at the same time halved "train"
    silently (2.3 of 4.7 MJ, no note). Now the overlap is named on both jobs and blocks "below"."""
    _, rows = _fleet(capsys, prom, "two-jobs", "--job-info", "slurm_job_info")
    _blocked(rows, "two jobs holding it at once")
    t0 = prom[1]["two-jobs"]
    m = tmp_path / "jobs.csv"
    m.write_text(
        f"job,gpu,start,end\ntrain,G5,{t0:.0f},{t0 + 7200:.0f}\nghost,G5,{t0 + 3600:.0f},{t0 + 7200:.0f}\n"
    )
    _, rows = _fleet(capsys, prom, "two-jobs", "--job-map", str(m))
    _blocked(rows, "two jobs holding it at once")


def test_pipes_that_contradict_the_calibrated_estimate_block_below(prom, capsys, tmp_path):
    """Before: with --profile the pipe counters' disagreement with the calibrated estimate was a note printed after
    the assessment: the pipe bound (3.3e18, under the 3.6e18 threshold) made "below" beside the note."""
    from test_fleet_prometheus import _sim_profile

    prof = _sim_profile(tmp_path / "h100.json")
    _, rows = _fleet(capsys, prom, "pipes-under", "--profile", str(prof), threshold="3.6e18")
    _blocked(rows, "calibrated energy and pipe estimates disagree")
    assert all(g["upper_flops"] < 3.6e18 for g in rows)  # the bound stands; the note keeps it from deciding


def test_a_scrape_interval_other_than_the_plans_is_named_both_ways(prom, capsys):
    """Scraped at 30 s, read as 15 s: half the expected samples (coverage 50 %); scraped at 15 s, read as 30 s: twice
    the samples a GPU can have. Either way the group says so and is never "below"."""
    _, rows = _fleet(capsys, prom, "scrape-30s")
    _blocked(rows, "telemetry covers only 50% of the run")
    _, rows = _fleet(capsys, prom, "honest", "--step", "30s")
    _blocked(rows, "more samples than scrapes")


def test_one_refused_chunk_stops_the_run_with_one_line_naming_the_query(prom, capsys):
    """Prometheus refuses one time chunk (``--query.max-samples``) after others answered: exit 2, one line naming
    the query and the engine's error, nothing printed as a result (never a fleet estimate missing a chunk)."""
    from hostile_http import HostileServer, proxy

    n = [0]

    def refuse_fifth(path, doc):
        n[0] += path.endswith("/query_range")
        if n[0] == 5 and path.endswith("/query_range"):
            return b'{"status":"error","errorType":"execution","error":"query processing would load too many samples"}'
        return doc

    with HostileServer(proxy(prom[0], refuse_fifth)) as srv:
        err, _ = _fleet(capsys, prom, "honest", "--time-chunk", "30m", url=srv.url, rc=2)
    assert "query_range" in err and "_over_time(DCGM_FI_" in err and "too many samples" in err


@pytest.mark.parametrize("end", ["9999-12-31T23:59:59Z", "2200-01-01T00:00:00Z"])
def test_an_end_centuries_away_is_refused_before_any_query(prom, capsys, end):
    """Before: 1.4e8 windows were planned in memory: 6.5 GB and no answer after 2 minutes (--run-timeout bounds
    queries, not the plan). Now: one line, exit 2, before any query."""
    from flopwatch.cli import main

    rc = main(["fleet", "estimate", "--prometheus", "http://127.0.0.1:9", "--start", "2026-01-01T00:00:00Z",
               "--end", end, "--window", "30m", "--no-progress", "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1 and "use a longer --window" in err, err


def test_one_uuid_on_two_hosts_is_named_and_never_below(prom, capsys):
    """Two busy GPUs under one UUID, each scraped every 30 s (together one GPU's scrape rate): already held before
    this round — the other host's lower counter reads as a driver reload in every window, so each window's energy
    comes from the power gauge (both hosts' power) and the resets block "below"."""
    _, rows = _fleet(capsys, prom, "uuid-two-hosts")
    _blocked(rows, "energy counter reset")


def test_a_job_moved_to_another_pod_is_judged_whole_by_cohort_and_fleet(prom, capsys):
    """Each pod label holds half the job and is judged as what ran under it (below a threshold the whole job is not
    under); the GPU's busy interval (``--by cohort``) and the fleet-wide total judge the whole job: never "below"."""
    doc, _ = _fleet(capsys, prom, "moved-pod", threshold="5e18")
    assert sorted(g["key"] for g in doc["groups"]) == ["train", "train-b"]
    assert doc["fleet"]["verdict"] == "uncertain" and doc["fleet"]["upper_flops"] > 5e18
    doc, rows = _fleet(capsys, prom, "moved-pod", "--by", "cohort", threshold="5e18")
    assert len(doc["groups"]) == 1 and all(
        g["verdict"] == "uncertain" and g["upper_flops"] > 5e18 for g in rows
    )


def test_a_reset_in_the_first_window_is_not_counted_as_energy(prom, capsys):
    """An honest driver reload in the range's first window. Before: a first window's energy was its counter range
    over every series (5 MJ of counter since boot before the reload, minus ~0 after it): the fleet's energy 2.1 × the
    truth with no note (on the simulated fleet with 3 reloads per GPU a pod reached 3.8 ×, "impossible" 915 W means
    for an H100). Now a first window whose range is over twice the power gauge's energy is a reset, named; its energy
    from power."""
    doc, rows = _fleet(capsys, prom, "reset-first-window")
    _blocked(rows, "energy counter reset")
    assert doc["fleet"]["energy_j"] == pytest.approx(650.0 * K * STEP, rel=0.02)


def test_utilisation_without_power_is_impossible_in_the_fleet_too(prom, capsys):
    """Before: kernels 95 % of the time at idle power bounded the GPU by its ~0 net energy: "below" 1e17, no note
    (``telemetry.consistency`` calls it impossible for a run, a trace and the monitor). Now the fleet applies the same
    rule (utilisation ≥ 0.5 at ≤ 1.05 × the claimed model's idle) per window."""
    _, rows = _fleet(capsys, prom, "util-no-power", threshold="1e17")
    _blocked(rows, "utilisation without power for 2.00 GPU-h")


def test_honest_mig_instances_are_not_a_gpu_reported_twice(prom, capsys):
    """Before: dcgm-exporter's repeated whole-GPU series on each MIG instance counted as "more samples than scrapes"
    on every MIG group (a false degradation), and the GPU's idle was subtracted once per instance (net energy too
    low: on a simulated MIG fleet "negative net energy"); now samples are counted per instance and the idle shared.
    The apportionment note stays."""
    doc, rows = _fleet(capsys, prom, "mig")
    _blocked(rows, "MIG: whole-GPU energy apportioned")
    assert not any("reported twice" in n for g in rows for n in g["notes"])
    assert doc["fleet"]["energy_j"] == pytest.approx(650.0 * K * STEP, rel=0.01)  # the GPU's energy once
    # and its idle once (before: once per instance, 70 W × 2 h too much)
    assert doc["fleet"]["net_energy_j"] == pytest.approx((650.0 - 70.0) * K * STEP, rel=0.01)
