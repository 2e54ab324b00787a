"""Round 11 red team on the fleet wing (the threat model's "Round 12 (fleet)"): what the other side controls may
widen a bound, block "below" or be refused with one line, never tighten a bound or leave a "below" unnamed.

The harness of round 5 (``test_round5_fleet.py``): hand-written (SIMULATED) histories of H100s for 2 h at 15 s,
backfilled with promtool into a real Prometheus on loopback, each family on its own day, judged with
``--verifier-operated``. The honest job draws 650 W throughout (4.68 MJ over the range) and runs its tensor pipe
55 % of the cycles: 7.8e18 issued fp8 FLOPs, so a threshold of 6.5e18 is under the truth and every "below" is wrong.
The ``util-*`` families are round 5's ``util-no-power`` (kernels 95 % of the time at 72 W, within 5 % of the H100's
70 W idle, no pipe activity: power under-reported), judged at 1e17 as there.
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
K, STEP, BUSY, IDLE = r5.K, r5.STEP, r5.BUSY, r5.IDLE
TRUE_J = 650.0 * K * STEP  # the busy GPU's energy over the range
BUSY_W = lambda k: 650.0  # noqa: E731


def _no(d: dict[str, float], *metrics: str) -> dict[str, float]:
    return {m: v for m, v in d.items() if m not in metrics}


#: round 5's `util-no-power` as an exporter that reports GPU_UTIL (%) and no GR_ENGINE_ACTIVE
DARK = {**_no(BUSY, M.GR_ACTIVE), M.POWER: 72.0, M.TENSOR: 0.0, M.FP32: 0.0, M.GPU_UTIL: 95.0}


def _families():
    idle_gr = {**IDLE, M.GPU_UTIL: 0.0}
    return {
        "honest": [r5._series(0, r5._lab("V0"), lambda k: BUSY)],
        # the dark GPU exports GPU_UTIL only; an idle GPU elsewhere in the fleet exports GR_ENGINE_ACTIVE
        "util-mixed": [
            r5._series(0, r5._lab("V1"), lambda k: DARK),
            r5._series(0, r5._lab("V1b", "other", Hostname="h1"), lambda k: idle_gr),
        ],
        # GR_ENGINE_ACTIVE (idle, 0) for the first 30 min only, then GPU_UTIL alone while the GPU is dark-busy
        "util-window": [
            r5._series(0, r5._lab("V2"), lambda k: {**DARK, M.GR_ACTIVE: 0.0, M.GPU_UTIL: 0.0} if k < 120 else DARK)
        ],
        # honest: one busy GPU exports GR_ENGINE_ACTIVE, another (an older exporter) GPU_UTIL only
        "mixed-honest": [
            r5._series(0, r5._lab("V3"), lambda k: BUSY),
            r5._series(0, r5._lab("V3b", "b", Hostname="h1"), lambda k: {**_no(BUSY, M.GR_ACTIVE), M.GPU_UTIL: 97.0}),
        ],
        # one namespace idle for an hour, then the GPU works under a label the selector does not match
        "selector-skip": [
            r5._series(0, r5._lab("V4", namespace="research"), lambda k: IDLE if k < 240 else None, lambda k: 75.0),
            r5._series(0, r5._lab("V4", "heavy", namespace="research "), lambda k: BUSY if k >= 240 else None),
        ],
        # round 5's `two-exporters` with the decoy's UUID spelled in lower case: one GPU read as two
        "uuid-case": [
            r5._series(0, r5._lab("GPU-AB", instance="a"), lambda k: None if k % 2 else {**BUSY, M.POWER: 500.0}, BUSY_W),
            r5._series(0, r5._lab("gpu-ab", "decoy", instance="b"), lambda k: {**BUSY, M.POWER: 800.0} if k % 2 else None, BUSY_W),
        ],
        # the exporter is down (or lags) for the first 30 min while the job runs from before the range (its counter
        # counts on): the first sample arrives under load
        "lag-start": [r5._series(0, r5._lab("V5"), lambda k: None if k < 120 else BUSY, BUSY_W)],
        # a UUID holding a newline and a tab (OpenMetrics escapes them; Prometheus stores the characters), beside an
        # honest GPU
        "uuid-control": [
            r5._series(0, r5._lab("GPU-a\\nb"), lambda k: BUSY),
            r5._series(0, r5._lab("GPU-t\\tc", Hostname="h1"), lambda k: BUSY),
        ],
        # a 2-GPU job; the second GPU reports its graphics engine 4 % busy for 30 min while it draws 650 W
        "cohort-split": [
            r5._series(0, r5._lab("V6"), lambda k: BUSY),
            r5._series(0, r5._lab("V6b", Hostname="h1"), lambda k: {**BUSY, M.GR_ACTIVE: 0.04} if 240 <= k < 360 else BUSY),
        ],
        # the job-info series names the GPU's UUID in another case than its DCGM series
        "info-case": [
            r5._series(0, r5._lab("GPU-CD", pod=None), lambda k: BUSY),
            r5._info(0, {"job": "train", "UUID": "gpu-cd"}, lambda k: True),
        ],
    }  # fmt: skip


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with r5.served(tmp_path_factory.mktemp("round11"), _families()) as got:
        yield got


def _notes(rows) -> list[str]:
    return [n for g in rows for n in g["notes"] if not n.startswith("no calibration")]


def test_honest_control_and_an_honest_mixed_fleet_have_no_notes(prom, capsys):
    """The honest job, and a fleet where one busy GPU exports GR_ENGINE_ACTIVE and another GPU_UTIL only: no note,
    the energy whole (the fix reads GPU_UTIL beside GR there and names no false gap)."""
    for fam, n in (("honest", 1), ("mixed-honest", 2)):
        doc, rows = r5._fleet(capsys, prom, fam, threshold=UNDER_TRUTH)
        assert _notes(rows) == [] and all(g["verdict"] == "uncertain" for g in rows), fam
        assert doc["fleet"]["energy_j"] == pytest.approx(n * TRUE_J, rel=0.01)


def test_gpu_util_is_read_where_a_gpu_lacks_gr_engine_active(prom, capsys):
    """`util-mixed`: GPU_UTIL was a fleet-wide fallback, read only where no GPU exported GR_ENGINE_ACTIVE. A dark GPU
    (95 % busy at idle power) exporting GPU_UTIL only, beside any GPU with GR, was never checked against its power:
    before, the fleet-wide total read "below" 1e17 (bound 3.4e16) with no note (its own group kept only "utilisation
    unknown"). Now GPU_UTIL is read where some GPU lacks GR, and every row holding the GPU says "utilisation without
    power", as round 5's `util-no-power` does for a fleet of one such GPU."""
    doc, rows = r5._fleet(capsys, prom, "util-mixed", threshold="1e17")
    train = [g for g in doc["groups"] if g["key"] == "train"]
    r5._blocked([*train, doc["fleet"]], "utilisation without power for 2.00 GPU-h")
    assert [g["verdict"] for g in doc["groups"] if g["key"] == "other"] == [
        "below"
    ]  # the idle GPU: honest "below"


def test_time_without_any_utilisation_is_named(prom, capsys):
    """`util-window`: GR_ENGINE_ACTIVE stops after the first (idle) 30 min, GPU_UTIL goes on but is not read (the GPU
    has GR, so it is no fallback): before, 1.5 h of the dark GPU had no utilisation, no check of power, and the job
    read "below" 1e17 with no note at all. Now time with samples but no utilisation is named (no check of power
    against activity can be made) and blocks "below"."""
    _, rows = r5._fleet(capsys, prom, "util-window", threshold="1e17")
    r5._blocked(rows, "utilisation unknown for 1.50 GPU-h")


def test_the_fleet_total_names_the_selector_it_covers(prom, capsys):
    """`selector-total`: with --selector the fleet-wide total covers only the selected series (here: the idle hour;
    the heavy hour ran under a label the selector misses), yet it was keyed "(all GPUs)" and the text header did not
    name the selector: "(all GPUs): below" over a GPU that ran 3.9e18. Its key and the header now say what it covers."""
    from flopwatch.cli import main

    sel = '{namespace="research"}'
    doc, _ = r5._fleet(capsys, prom, "selector-skip", "--selector", sel, threshold=UNDER_TRUTH)
    assert doc["fleet"]["key"] == f"(all GPUs matching {sel})" and doc["selector"] == sel
    # without the selector: the whole GPU, and the plain key
    doc, _ = r5._fleet(capsys, prom, "selector-skip", threshold=UNDER_TRUTH)
    assert doc["fleet"]["key"] == "(all GPUs)" and doc["fleet"]["energy_j"] > TRUE_J / 2
    day = prom[1]["selector-skip"]
    assert main(["fleet", "estimate", "--prometheus", prom[0], "--start", f"{day:.0f}", "--end",
                 f"{day + K * STEP:.0f}", "--window", "30m", "--selector", sel, "--no-progress", "--threshold", UNDER_TRUTH,
                 "--verifier-operated"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert f"{prom[0]} {sel} by pod" in out and f"(all GPUs matching {sel}): below" in out


@pytest.mark.parametrize("window", ["30m", "1h", "2h"])
def test_telemetry_that_starts_under_load_after_the_range_begins_is_named(prom, capsys, window):
    """`lag-start`, round 8's `lag-end` at the other edge: an exporter down for the range's first 30 min while the job
    works (its counter counts on, but a first sample says nothing of what came before it). Before: the 30 min were in
    no duration and nothing said so: "below" 6.5e18 (bound 5.9e18), no note, at every window. Now a series whose
    first sample is under load while its GPU is seen nowhere in the window before (in the first window: its time
    falls two scrapes short of the range's start) is named, as a series that stops under load is."""
    _, rows = r5._fleet(capsys, prom, "lag-start", "--window", window, threshold=UNDER_TRUTH)
    r5._blocked(rows, "starts under load after it begins")


@pytest.mark.parametrize("extra", [(), ("--gpus-per-chunk", "1")])
def test_a_uuid_with_control_characters_is_read_not_refusing_the_fleet(prom, capsys, extra):
    """`uuid-control`: the chunk matcher escaped RE2 metacharacters and the quote, not control characters: one GPU
    whose UUID holds a newline put a raw newline into every query string of its chunk, and Prometheus refused it
    ("unterminated quoted string"): the whole fleet estimate exited 2, naming ``--prometheus``, so one exporter's label
    made the fleet unauditable. Now the matcher is spelled as a JSON string (``plan.re_escape``): both GPUs read."""
    doc, rows = r5._fleet(capsys, prom, "uuid-control", *extra, threshold=UNDER_TRUTH)
    assert doc["fleet"]["gpus"] == 2 and doc["fleet"]["energy_j"] == pytest.approx(2 * TRUE_J, rel=0.01)
    assert _notes(rows) == [] and all(g["verdict"] != "below" for g in rows)


def test_a_utilisation_dip_under_load_does_not_split_a_cohort(prom, capsys):
    """`cohort-split`: cohorts (GPUs whose busy windows start and stop together) exist to judge a job whole whatever
    its labels say. A window was busy by utilisation alone where reported, so one GPU reporting 4 % for 30 min while
    drawing 650 W left its job's cohort: two one-GPU cohorts, each "below" 1.2e19 (7.85e18) with no note, for a job of
    1.57e19. Now a window is busy when utilisation is over 5 % or power shows load: one cohort, never "below"."""
    doc, rows = r5._fleet(capsys, prom, "cohort-split", "--by", "cohort", threshold="1.2e19")
    assert len(doc["groups"]) == 1 and all(
        g["verdict"] != "below" and g["upper_flops"] > 1.5e19 for g in rows
    )


def test_held_a_uuid_in_two_spellings_or_joined_in_another_case(prom, capsys):
    """Held (no fix): one GPU read as two UUIDs (the decoy spelled in lower case, alternate scrapes) splits nothing
    from the job: each spelling has its own counter, so "train" keeps the GPU's energy and half its scrapes are
    named; an info series whose UUID differs in case joins nothing, and the time is "(no job)", named (since round
    13, `job-unseen`, the job the info series names is a group too: its time held on a GPU no series reports)."""
    doc, rows = r5._fleet(capsys, prom, "uuid-case", threshold=UNDER_TRUTH)
    train = next(g for g in doc["groups"] if g["key"] == "train")
    assert train["energy_j"] >= 0.99 * TRUE_J
    r5._blocked(rows, "telemetry covers only 50% of the run")
    doc, rows = r5._fleet(capsys, prom, "info-case", "--job-info", "slurm_job_info", "--job-gpu-labels", "UUID",
                          threshold=UNDER_TRUTH)  # fmt: skip
    assert [g["key"] for g in doc["groups"]] == ["(no job)", "train"]
    r5._blocked(doc["groups"][:1], "missing labels")
    r5._blocked(
        doc["groups"][1:], "held for 2.00 GPU-h (job map or info series) on GPUs no DCGM series reports"
    )
    assert all(g["verdict"] != "below" for g in rows)


def test_held_a_lying_buildinfo_never_tightens_the_bound(prom, capsys):
    """Held: a proxy that makes Prometheus 2.x (closed ranges) claim 3.0 (left-open): windows then share their
    boundary sample (counted twice): the bound widens a little (7.91e18 vs 7.85e18), energy unchanged."""
    from hostile_http import HostileServer, proxy

    def lie(path, doc):
        return {**doc, "data": {**doc["data"], "version": "3.0.0"}} if path.endswith("buildinfo") else doc

    honest, _ = r5._fleet(capsys, prom, "honest", threshold=UNDER_TRUTH)
    with HostileServer(proxy(prom[0], lie)) as srv:
        doc, rows = r5._fleet(capsys, prom, "honest", url=srv.url, threshold=UNDER_TRUTH)
    assert all(g["verdict"] != "below" for g in rows)
    assert doc["fleet"]["upper_flops"] >= honest["fleet"]["upper_flops"]
    assert doc["fleet"]["energy_j"] == pytest.approx(TRUE_J, rel=0.01)


@pytest.mark.parametrize(
    ("extra", "note"),
    [
        (("--window", "40s"), None),  # not a multiple of the 15 s scrape: 2 or 3 samples a window
        (("--window", "50s"), None),
        (("--step", "5s"), "telemetry covers only 34%"),  # --step under the true scrape interval
        (("--step", "10s"), "telemetry covers only 67%"),
        (("--step", "20s"), "a GPU reported twice"),  # over it
    ],
)
def test_held_window_and_step_off_the_scrape_interval(prom, capsys, extra, note):
    """Held: a window that is no multiple of the scrape interval keeps the energy and bound; a --step other than the
    true scrape interval is named either way (round 5 tried 30 s against 15 s; here 5, 10 and 20 s)."""
    doc, rows = r5._fleet(capsys, prom, "honest", *extra, threshold=UNDER_TRUTH)
    assert doc["fleet"]["energy_j"] == pytest.approx(TRUE_J, rel=0.01)
    assert all(g["verdict"] != "below" and g["upper_flops"] >= 7.8e18 for g in rows)
    if note is None:
        assert _notes(rows) == []
    else:
        r5._blocked(rows, note)
