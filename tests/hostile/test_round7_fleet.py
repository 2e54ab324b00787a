"""Round 7 red team on the fleet wing (the threat model's "Round 8 (fleet)"): families nobody listed, found by the
principle that what the other side controls may widen a bound, block "below" or be refused, never tighten a bound.

The harness of round 5 (``test_round5_fleet.py``): hand-written (SIMULATED) histories of one H100 for 2 h at 15 s,
backfilled with promtool into a real Prometheus on loopback, each family on its own day, judged with
``--verifier-operated`` (so the data checks themselves are what is tested). The honest job runs its tensor pipe
55 % of the cycles at the maximum clock: in fp8 that is 0.55 × 1979 TFLOP/s × 7200 s = 7.8e18 issued FLOPs, at
least 7e18 useful ones, so a threshold of 6.5e18 sits under the truth and every "below" there is wrong.
"""

from __future__ import annotations

import json

import pytest
import test_round5_fleet as r5  # the round-5 harness (a module attribute: its tests are not collected twice)

from flopwatch.telemetry import dcgm_metrics as M
from prom_helpers import find_tool

pytestmark = pytest.mark.skipif(
    find_tool("promtool") is None or find_tool("prometheus") is None,
    reason="needs promtool and prometheus (Debian package 'prometheus')",
)

#: Under the fp8 truth (≥ 7e18), over what the lies below bounded the job at before this round (5.9e18).
UNDER_TRUTH = "6.5e18"
K, HALF = r5.K, r5.K // 2
END_W = lambda k: 650.0 if k < 400 else 75.0  # noqa: E731  (the counter of the job that ends at scrape 400)
INFO = {"job": "train", "Hostname": "h0", "gpu": "0"}  # a Slurm job-info series of the GPU (host and index)


def _hmma(d: dict[str, float]) -> dict[str, float]:
    """The same readings as a Hopper exporter with the HMMA field configured reports them."""
    d = dict(d)
    d[M.HMMA] = d.pop(M.TENSOR)
    return d


def _without(d: dict[str, float], metric: str) -> dict[str, float]:
    return {m: v for m, v in d.items() if m != metric}


def _families():
    busy = lambda k: r5.BUSY[M.POWER]  # noqa: E731
    idle_pipes = {**r5.BUSY, M.GR_ACTIVE: 0.0, M.TENSOR: 0.0, M.FP32: 0.0}
    return {
        "honest": [r5._series(0, r5._lab("R0"), lambda k: r5.BUSY)],
        # the tensor field stops for the last 40 % of the scrapes while the other profiling fields go on
        "pipe-field-gap": [
            r5._series(0, r5._lab("R1"), lambda k: r5.BUSY if k < 0.6 * K else _without(r5.BUSY, M.TENSOR))
        ],
        # an honest exporter upgrade half way: TENSOR_ACTIVE before, TENSOR_HMMA_ACTIVE after (HMMA then stood in
        # for TENSOR on every GPU and window, so the first half's tensor work read as 0)
        "hmma-upgrade": [r5._series(0, r5._lab("R2"), lambda k: r5.BUSY if k < HALF else _hmma(r5.BUSY))],
        # two exporters report the GPU on alternate scrapes (round 5's two-exporters), read with --window 2m
        "short-window-twins": r5._families()["two-exporters"],
        # an honest pod change at scrape 244: inside a 2 min window (8 scrapes), so both pods' series are in it
        "handover": [
            r5._series(0, r5._lab("R4"), lambda k: r5.BUSY if k < 244 else None, busy),
            r5._series(0, r5._lab("R4", "next"), lambda k: r5.BUSY if k >= 244 else None, busy, e0=5e9 + 650e3 * 15 * 244),
        ],
        # a MIG-labelled idle "instance" beside the whole GPU's series, repeating its power and counter as MIG
        # instances do: the whole GPU's series kept a third of the energy, silently
        "mig-beside-whole": [
            r5._series(0, r5._lab("R5"), lambda k: r5.BUSY),
            *(r5._series(0, r5._lab("R5", f"decoy{i}", GPU_I_ID=str(i)), lambda k: idle_pipes, busy) for i in (1, 2)),
        ],
        # no job label on the DCGM series; the job's info series, plus a copy of it (another instance label) for
        # the first window only
        "info-burst": [
            r5._series(0, r5._lab("R6", pod=None), lambda k: r5.BUSY),
            r5._info(0, INFO, lambda k: True),
            r5._info(0, {**INFO, "instance": "b:9100"}, lambda k: k < 120),
        ],
        # an info exporter scraped every 30 s, but every 15 s in the first window (a scrape-interval change)
        "info-interval-change": [
            r5._series(0, r5._lab("R7", pod=None), lambda k: r5.BUSY),
            r5._info(0, INFO, lambda k: k % 2 == 0 or k < 120),
        ],
        # an idle GPU with its UUID, and a busy one whose exporter drops the UUID label (host and index only)
        "no-uuid": [
            r5._series(0, r5._lab("R8", pod="idle"), lambda k: r5.IDLE),
            r5._series(0, {k: v for k, v in r5._lab("-", Hostname="h1").items() if k != "UUID"}, lambda k: r5.BUSY),
        ],
        # the exporter misses 3 of 4 scrapes in the first 30 min (the GPU busy throughout; its counter counts on)
        "sparse-edge": [
            r5._series(0, r5._lab("R9"), lambda k: None if k < 120 and k % 4 else r5.BUSY, lambda k: 650.0)
        ],
        # the exporter stops 27.5 min before the range ends (inside the last 30 min window), the GPU working on
        "lag-end": [r5._series(0, r5._lab("R10"), lambda k: r5.BUSY if k < 370 else None, lambda k: 650.0)],
        # honest: the job ends 20 min before the range ends; the GPU stays exported, idle and without a pod
        "job-ends": [
            r5._series(0, r5._lab("R11"), lambda k: r5.BUSY if k < 400 else None, END_W),
            r5._series(0, r5._lab("R11", pod=None), lambda k: r5.IDLE if k >= 400 else None, END_W),
        ],
        # honest: DRAM activity (read only with --profile) exported for the first hour only
        "dram-partial": [r5._series(0, r5._lab("R12"), lambda k: {**r5.BUSY, **({M.DRAM: 0.3} if k < HALF else {})})],
    }  # fmt: skip


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with r5.served(tmp_path_factory.mktemp("round7"), _families()) as got:
        yield got


def test_honest_control_is_over_the_threshold_with_no_note(prom, capsys):
    _, rows = r5._fleet(capsys, prom, "honest", threshold=UNDER_TRUTH)
    for g in rows:
        assert g["verdict"] == "uncertain" and g["upper_flops"] > 7e18
        assert [n for n in g["notes"] if not n.startswith("no calibration")] == [], g["notes"]


@pytest.mark.parametrize("family", ["pipe-field-gap"])
def test_a_pipe_field_missing_while_the_others_go_on_is_unobserved_not_zero(prom, capsys, family):
    """`pipe-field-gap`, `hmma-upgrade`: a cell counted as profiled when *any* profiling field had a value, so a
    tensor field missing there read as 0 tensor activity. Before: bound 5.9e18 under the fp8 truth (≥ 7e18), "below"
    6.5e18 with no note. Now a cell is profiled only where every profiling field read has a value: the rest is
    named ("profiling counters paused") and bounded at peak rate."""
    _, honest = r5._fleet(capsys, prom, "honest", threshold=UNDER_TRUTH)
    _, rows = r5._fleet(capsys, prom, family, threshold=UNDER_TRUTH)
    r5._blocked(rows, "profiling counters paused")
    for a, b in zip(rows, honest, strict=True):
        assert a["upper_flops"] >= b["upper_flops"]


def test_an_exporter_moving_from_tensor_to_hmma_keeps_the_honest_bound(prom, capsys):
    """`hmma-upgrade` (honest): named "profiling counters paused" in round 7; since round 9 (threat model) both
    fields are read per window, the larger where both exist: no note, the honest bound."""
    _, honest = r5._fleet(capsys, prom, "honest", threshold=UNDER_TRUTH)
    _, rows = r5._fleet(capsys, prom, "hmma-upgrade", threshold=UNDER_TRUTH)
    for a, b in zip(rows, honest, strict=True):
        assert [n for n in a["notes"] if not n.startswith("no calibration")] == [], a["notes"]
        assert a["verdict"] == "uncertain" and a["upper_flops"] == pytest.approx(b["upper_flops"], rel=1e-6)


def test_twin_series_of_one_gpu_are_named_at_short_windows(prom, capsys):
    """`short-window-twins`: the interleaved-exporter check ran only on windows of 16 scrapes or more, so with
    ``--window 2m`` the decoy pod kept half the GPU (3.9e18) with no note: "below" 5e18. Twins span the window's
    counter range window after window (a job change: in one window only), and are named at any window."""
    for window in ("2m", "3m"):
        _, rows = r5._fleet(capsys, prom, "short-window-twins", "--window", window, threshold="5e18")
        r5._blocked(rows, "a GPU reported twice")


def test_an_honest_handover_inside_a_short_window_is_not_a_gpu_reported_twice(prom, capsys):
    doc, rows = r5._fleet(capsys, prom, "handover", "--window", "2m", threshold=UNDER_TRUTH)
    assert sorted(g["key"] for g in doc["groups"]) == ["next", "train"]
    assert not any("reported twice" in n for g in rows for n in g["notes"]), [g["notes"] for g in rows]
    assert doc["fleet"]["upper_flops"] > 7e18


def test_a_window_of_one_scrape_is_refused(prom, capsys):
    """One scrape per window cannot tell twin series on alternate scrapes from job changes: one line, exit 2."""
    err, _ = r5._fleet(capsys, prom, "honest", "--window", "15s", rc=2)
    assert "--window" in err and "two scrapes" in err


def test_a_whole_gpu_series_beside_mig_instances_of_it_is_named(prom, capsys):
    """`mig-beside-whole`: one GPU cannot be whole and MIG-partitioned at once. Before: the idle MIG "instances"
    repeating its power and counter took two thirds of its energy; the "train" group read 1.6 MJ of 4.7 MJ with
    no note (the pipes kept its bound; the built-in estimate fell to 0, where it makes no statement). Now the GPU
    is reported twice wherever both kinds of series hold on, on every group."""
    _, rows = r5._fleet(capsys, prom, "mig-beside-whole", threshold=UNDER_TRUTH)
    r5._blocked(rows, "a GPU reported twice")


def test_a_burst_of_job_info_samples_does_not_shrink_the_jobs_other_windows(prom, capsys):
    """`info-burst`: with ``--job-info`` a GPU's whole window was its busiest window's count of info samples, so a
    copy of the job's info series in one window made every other window half the job's: "train" kept 63 % of the
    GPU (bound 4.9e18), "below" 6.5e18 with no note on it (only the "(no job)" group named its part). Now a window
    the job holds between two it holds is the job's whole, the norm of a window is the median of the inner ones,
    and the window with twice the samples is a GPU reported twice."""
    doc, rows = r5._fleet(capsys, prom, "info-burst", "--job-info", "slurm_job_info", threshold=UNDER_TRUTH)
    r5._blocked(rows, "a GPU reported twice")
    assert [g["key"] for g in doc["groups"]] == ["train"] and doc["groups"][0]["upper_flops"] > 7e18


def test_a_job_info_scrape_interval_change_keeps_the_job_whole(prom, capsys):
    """`info-interval-change` (honest): 15 s info samples in the first window, 30 s after. Before: every 30 s window
    read as half the job's, "train" "below" 6.5e18 (bound 4.9e18), no note. Now the job keeps the GPU."""
    doc, _ = r5._fleet(
        capsys, prom, "info-interval-change", "--job-info", "slurm_job_info", threshold=UNDER_TRUTH
    )
    train = next(g for g in doc["groups"] if g["key"] == "train")
    assert train["verdict"] == "uncertain" and train["upper_flops"] > 7e18
    assert train["energy_j"] == pytest.approx(650.0 * K * 15.0, rel=0.01)


@pytest.mark.parametrize("by", ["pod", "node", "cohort"])
def test_a_gpu_without_the_chunk_label_is_read(prom, capsys, by):
    """`no-uuid`: the fleet is cut into chunks by UUID when any GPU has one; series without a UUID matched no
    chunk and were never read. Before: the busy GPU (7.8e18 of fp8 tensor work) was in no group and not in the
    fleet-wide total, which read "below" 6.5e18 (bound 1.7e16, the idle GPU's) with no note. Now series without
    the label are matched by its empty value and judged like any other (host and index name the GPU)."""
    doc, rows = r5._fleet(capsys, prom, "no-uuid", "--by", by, threshold=UNDER_TRUTH)
    assert (
        doc["fleet"]["gpus"] == 2
        and doc["fleet"]["verdict"] != "below"
        and doc["fleet"]["upper_flops"] > 7e18
    )
    busy = [g for g in doc["groups"] if g["upper_flops"] > 7e18]
    assert len(busy) == 1 and busy[0]["verdict"] == "uncertain" and busy[0]["gpus"] == 1


def test_a_lone_surrogate_in_a_label_value_or_an_option_is_one_line(prom, capsys):
    """`lone-surrogate`: JSON can spell a lone UTF-16 surrogate (``"GPU-\\ud800"``) that no UTF-8 text holds, and
    Python decodes an undecodable byte of argv to one. Before: a UUID so spelled (the label-values answer) or a
    ``--selector`` with a byte 0xFF reached the query's URL encoding and ended in a UnicodeEncodeError traceback.
    Now: one line naming the query, exit 2."""
    from hostile_http import HostileServer, proxy

    def spoil(path, doc):
        if path.endswith("/label/UUID/values"):
            doc["data"] = [v + "\ud800" for v in doc["data"]]
        return doc

    with HostileServer(proxy(prom[0], spoil)) as srv:
        err, _ = r5._fleet(capsys, prom, "honest", url=srv.url, rc=2)
    assert "not text" in err and "query_range" in err
    err, _ = r5._fleet(capsys, prom, "honest", "--selector", '{pod="\udcff"}', rc=2)
    assert "not text" in err and "\\udcff" in err


@pytest.mark.parametrize("window", ["30m", "1h", "2h"])
def test_scrapes_missed_in_an_edge_window_are_unobserved_time(prom, capsys, window):
    """`sparse-edge`: a window with samples on one side only (the range's or a job's first or last) stood for its
    samples × the step, as if the job had started at the first of them. With 3 of 4 scrapes missed in the first
    30 min, 22 min of work were in no duration: coverage 100 %, bound 6.4e18, "below" 6.5e18 with no note at
    ``--window 1h`` or ``2h`` (at 30 min only a false "energy counter reset" blocked it, and lost 0.9 MJ). Now an
    edge cell alone on its GPU stands for at least the time its counter rose at its mean power: the missed
    scrapes are unobserved time, named, at peak rate."""
    doc, rows = r5._fleet(capsys, prom, "sparse-edge", "--window", window, threshold=UNDER_TRUTH)
    r5._blocked(rows, "telemetry covers only 82%")
    assert doc["fleet"]["energy_j"] == pytest.approx(650.0 * K * 15.0, rel=0.01)
    assert not any("reset" in n for g in rows for n in g["notes"])


@pytest.mark.parametrize("window", ["30m", "2h"])
def test_telemetry_that_stops_under_load_in_the_last_window_is_named(prom, capsys, window):
    """`lag-end`: "telemetry stops under load" was never checked in the range's last window, so an exporter that
    stopped (or lagged) 27.5 min before the end of a 2 h range left that time out of the job's duration: bound
    6.0e18, "below" 6.5e18 with no note at ``--window 2h`` (one window) or with a stop inside the last 30 min
    window. Now the last window is checked too, where the GPU's time in it falls short of the range's end."""
    _, rows = r5._fleet(capsys, prom, "lag-end", "--window", window, threshold=UNDER_TRUTH)
    r5._blocked(rows, "stops under load before the range ends")
    # the honest control: the job ends, the GPU stays exported (idle, no pod) to the end: no such note
    _, rows = r5._fleet(capsys, prom, "job-ends", "--window", window, threshold=UNDER_TRUTH)
    assert not any("stops under load" in n for g in rows for n in g["notes"]), [g["notes"] for g in rows]


def test_a_range_that_is_not_a_whole_number_of_windows_is_refused(prom, capsys):
    """`range-past-end`: windows end at start + k × window, so with ``--end`` inside the last window that window
    reached past it. Before: ``--end`` 1.25 h after the start with ``--window 1h`` reported 2 h of the job (4.7 MJ
    for the range's 2.9 MJ; the group's ``end`` 45 min after ``--end``): work after the range in its estimate and
    bound, and in an "above". Now one line, exit 2; a whole number of windows reads exactly the range."""
    from flopwatch.cli import main

    day = prom[1]["honest"]
    args = ["fleet", "estimate", "--prometheus", prom[0], "--start", f"{day:.0f}", "--retries", "0",
            "--no-progress", "--json", "--verifier-operated"]  # fmt: skip
    assert main([*args, "--end", f"{day + 4500:.0f}", "--window", "1h"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "--window" in err and "whole number" in err, err
    assert main([*args, "--end", f"{day + 4500:.0f}", "--window", "15m"]) == 0
    doc = json.loads(capsys.readouterr()[0])
    assert doc["fleet"]["energy_j"] == pytest.approx(650.0 * 4500, rel=0.01)
    assert doc["fleet"]["end"] <= doc["end"]


def test_a_field_outside_the_pipe_bound_missing_is_not_a_pause(prom, capsys, tmp_path):
    """The rule of `pipe-field-gap` is about the pipe bound: DRAM activity (a profile's TB term) missing for an hour
    while the pipes go on is no pause of the pipe counters (no note, the honest bound)."""
    from test_fleet_prometheus import _sim_profile

    prof = str(_sim_profile(tmp_path / "h100.json"))
    _, rows = r5._fleet(capsys, prom, "dram-partial", "--profile", prof, threshold=UNDER_TRUTH)
    _, honest = r5._fleet(capsys, prom, "honest", "--profile", prof, threshold=UNDER_TRUTH)
    for a, b in zip(rows, honest, strict=True):
        assert not any("paused" in n or "missing" in n for n in a["notes"]), a["notes"]
        assert a["upper_flops"] == pytest.approx(b["upper_flops"], rel=1e-6)
