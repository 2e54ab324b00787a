"""Round 12 red team on the fleet wing (the threat model's "Round 13 (fleet)"): what the other side controls may
widen a bound, block "below" or be refused with one line, never tighten a bound or leave a "below" unnamed.

The harness of round 5 (``test_round5_fleet.py``): hand-written (SIMULATED) histories of H100s for 2 h at 15 s,
backfilled with promtool into a real Prometheus on loopback, each family on its own day, judged with
``--verifier-operated``. The honest job draws 650 W throughout (4.68 MJ) and runs its tensor pipe 55 % of the
cycles: 7.85e18 issued fp8 FLOPs per GPU over the range. Here the job is joined from a job source (``--job-map``
or ``--job-info``), not from labels on the DCGM series: the job source says when a job held a GPU, the DCGM
series whether anything reported it then.
"""

from __future__ import annotations

import pytest
import test_round5_fleet as r5  # the round-5 harness (a module attribute: its tests are not collected twice)

from prom_helpers import find_tool

pytestmark = pytest.mark.skipif(
    find_tool("promtool") is None or find_tool("prometheus") is None,
    reason="needs promtool and prometheus (Debian package 'prometheus')",
)

K, STEP, BUSY, IDLE = r5.K, r5.STEP, r5.BUSY, r5.IDLE
TRUE_J = 650.0 * K * STEP
UNSEEN = "(job map or info series) on GPUs no DCGM series reports then: unobserved"


def _ends_idle(uuid: str):
    """Busy 30 min, idle-looking 30 min, then no series: the job works on (its counter counts 1.5 h of 650 W in
    all) while nothing reports the GPU. Truth: 1.5 h busy, 5.9e18 FLOPs."""
    shown = lambda k: BUSY if k < 120 else (IDLE if k < 240 else None)  # noqa: E731
    return r5._series(0, r5._lab(uuid, pod=None), shown, lambda k: 75.0 if 120 <= k < 240 else 650.0)


def _families():
    return {
        "honest": [
            r5._series(0, r5._lab("U0", pod=None), lambda k: BUSY),
            r5._info(0, {"job": "train", "Hostname": "h0", "gpu": "0"}, lambda k: True),
        ],
        # the job's telemetry ends idle-looking an hour before the job does (job map / info series: 2 h)
        "end-unseen": [
            _ends_idle("U1"),
            r5._info(0, {"job": "train", "Hostname": "h0", "gpu": "0"}, lambda k: True),
        ],
        # the job holds h0/gpu1 for 2 h, a GPU with no DCGM series at all; an idle neighbour is reported
        "gpu-unseen": [
            r5._series(0, r5._lab("U2", pod=None), lambda k: IDLE),
            r5._info(0, {"job": "idle", "Hostname": "h0", "gpu": "0"}, lambda k: True),
            r5._info(0, {"job": "ghost", "Hostname": "h0", "gpu": "1"}, lambda k: True),
        ],
    }


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    with r5.served(tmp_path_factory.mktemp("round12f"), _families()) as got:
        yield got


def _map(tmp_path, prom, family: str, rows: list[tuple[str, str, float, float]]) -> str:
    t0 = prom[1][family]
    m = tmp_path / f"{family}.csv"
    m.write_text(
        "job,gpu,start,end\n" + "".join(f"{j},{g},{t0 + a:.0f},{t0 + b:.0f}\n" for j, g, a, b in rows)
    )
    return str(m)


def _notes(rows) -> list[str]:
    return [n for g in rows for n in g["notes"] if not n.startswith("no calibration")]


def test_honest_job_sources_are_unchanged(prom, capsys, tmp_path):
    """The honest job, joined from a mapping file (by UUID and by host/index) or the info series: no note, the
    energy whole, "uncertain" at a threshold under the truth: the job source's time is the series' time."""
    for how in (
        ("--job-map", _map(tmp_path, prom, "honest", [("train", "U0", 0, K * STEP)])),
        ("--job-map", _map(tmp_path, prom, "honest", [("train", "h0/gpu0", -600, K * STEP + 600)])),
        ("--job-info", "slurm_job_info"),
    ):
        doc, rows = r5._fleet(capsys, prom, "honest", *how, threshold="6.5e18")
        assert [g["key"] for g in doc["groups"]] == ["train"], how
        assert _notes(rows) == [] and all(g["verdict"] == "uncertain" for g in rows), how
        assert doc["fleet"]["energy_j"] == pytest.approx(TRUE_J, rel=0.01)
    # --by cohort with a job source: groups are cohorts, so no job's time is compared with them (no false note)
    _, rows = r5._fleet(
        capsys, prom, "honest", "--by", "cohort", "--job-info", "slurm_job_info", threshold="6.5e18"
    )
    assert _notes(rows) == [] and all(g["verdict"] == "uncertain" for g in rows)


def test_a_job_held_after_its_telemetry_ends_is_unobserved(prom, capsys, tmp_path):
    """`job-unseen-end`: the job source says the job held its GPU 2 h; the exporter reported it for 1 h (the last
    half hour idle-looking) and then nothing. Before: the hour nothing reported was in no duration, "train" and the
    total "below" 3e18 (bound 1.95e18, truth 5.9e18) with no note, by mapping file and by info series. Now the held
    time no series reports is the job's unobserved time, named and bounded at peak rate."""
    m = _map(tmp_path, prom, "end-unseen", [("train", "U1", 0, K * STEP)])
    for how in (("--job-map", m), ("--job-info", "slurm_job_info")):
        doc, rows = r5._fleet(capsys, prom, "end-unseen", *how, threshold="3e18")
        r5._blocked(rows, f"held for 1.00 GPU-h {UNSEEN}")
        assert all(g["upper_flops"] > 5.9e18 for g in rows), how  # the truth is under the bound again
        assert doc["fleet"]["energy_j"] == pytest.approx(1.29e6, rel=0.01)  # what was reported: unchanged


def test_a_job_on_a_gpu_no_series_reports_is_a_group_never_dropped(prom, capsys, tmp_path):
    """`job-unseen-gpu`: the job source gives a job a GPU that has no DCGM series at all (its exporter removed, or
    the GPU named as no series names it). Before: the job was in no group and the fleet-wide total read "below"
    (1.7e16, the idle neighbour's) with no note. Now the job is a group of unobserved time (no model reported: no
    bound, never "below"), and the total carries the time."""
    m = _map(tmp_path, prom, "gpu-unseen", [("idle", "U2", 0, K * STEP), ("ghost", "GPU-X", 0, K * STEP),
                                            ("ghost2", "h0/gpu1", 0, K * STEP)])  # fmt: skip
    for how, ghosts in (
        (("--job-info", "slurm_job_info"), ["ghost"]),
        (("--job-map", m), ["ghost", "ghost2"]),
    ):
        doc, rows = r5._fleet(capsys, prom, "gpu-unseen", *how, threshold="6.5e18")
        got = {g["key"]: g for g in doc["groups"]}
        assert sorted(got) == sorted([*ghosts, "idle"]), how
        r5._blocked([got[k] for k in ghosts], f"held for 2.00 GPU-h {UNSEEN}")
        assert all(got[k]["upper_flops"] is None for k in ghosts)  # no model: nothing bounds it
        r5._blocked([doc["fleet"]], f"held for {2 * len(ghosts)}.00 GPU-h {UNSEEN}")
        assert (
            got["idle"]["verdict"] == "below" and _notes([got["idle"]]) == []
        )  # the honest idle job unchanged
    # the verifier's --device states the model: the unobserved time is bounded at its peak rate, still not "below"
    doc, rows = r5._fleet(capsys, prom, "gpu-unseen", "--job-info", "slurm_job_info", "--device", "h100",
                          threshold="6.5e18")  # fmt: skip
    ghost = next(g for g in doc["groups"] if g["key"] == "ghost")
    assert ghost["verdict"] == "uncertain" and ghost["upper_flops"] > 7.85e18
