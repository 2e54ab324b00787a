"""Round 9 red team on runs, ledgers and the window verdict, by principle: a "below" rests only on physics and on
what the verifier itself observes; whatever the other side controls (a row's signed bound, its warnings, its
status, a name it leaves out) may widen a bound or block "below", never tighten it.

Each test builds an honest heavy run on the SIMULATED twins (flopwatch.sim, seed 2; every number here is simulated)
so that the truth is known, attacks it with a threshold under the truth, and asserts: never "below", a named
warning, and the honest case unchanged. Fixes, each at the principle's one place: ``evaluate.window.reassess_row``
(every ledger row recomputed from its observables, with or without ``--profile``; the larger bound stands) and
``estimate.verdict.unnamed_device`` (a run naming no device is judged as the profile's, warned). Table:
docs/threat-model.md, "Round 9 (runs, ledgers, windows)".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from flopwatch.cli import main
from flopwatch.devices import DEVICES
from flopwatch.estimate.verdict import assess_record
from flopwatch.evaluate.window import reassess_row
from flopwatch.records import WorkloadRecord
from flopwatch.redteam.simulated import to_record

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the shared simulated observables
from sound_helpers import never_below as _never_below
from sound_helpers import sim_obs, sim_run  # noqa: E402

W0 = 1.7e9


# ------------------------------------------------------------------------------ a ledger row's signed bound
def _h100_row(family) -> tuple[dict[str, Any], float]:  # noqa: ANN001
    """A monitor row of an honest bf16 run on the SIMULATED H100 (NVML at 10 Hz, pipe counters over all of it),
    as today's daemon signs it: its bound recomputed by the verifier's rule. Returns (row, true FLOPs)."""
    acc, run = sim_run("h100", family[0])
    obs = sim_obs(acc, run, pipes=True, clocks=True)
    row = {
        "workload_id": "w1",
        "session_id": "s1",
        "device": "gpu0",
        "device_name": DEVICES["h100"].name,
        "status": "complete",
        "start_wall": W0 + 10.0,
        "end_wall": W0 + 10.0 + obs.duration_s,
        "duration_s": obs.duration_s,
        "net_energy_j": obs.net_energy_j,
        "idle_power_w": obs.idle_power_w,
        "mean_util": obs.mean_util,
        "min_sm_clock_mhz": obs.min_sm_clock_mhz,
        "max_sm_clock_mhz": obs.max_sm_clock_mhz,
        "peak_power_w": obs.peak_power_w,
        "pipe_active_s": dict(obs.pipe_active_s or {}),
        "pipe_observed_s": obs.duration_s,
        "estimate_flops": float(run.total_flops),
        "lower_flops": 0.0,
        "regime": "calibrated",
        "warnings": [],
        "context": {"sensor_kind": "nvml", "sample_rate_hz": 10.0, "peaks_in_force": dict(DEVICES["h100"].peak_flops)},
    }  # fmt: skip
    honest = reassess_row({**row, **row["context"], "regime": None}, None, "h100")
    assert not honest["warnings"], honest["warnings"]
    row["upper_flops"] = honest["upper_flops"]
    return row, float(run.total_flops)


def _signed_ledger(tmp: Path, row: dict[str, Any], tail: dict[str, Any] | None = None) -> list[str]:
    """A ledger holding ``row`` between checkpoints, signed with its own key (the test's: as a node's root could
    re-sign), its head witnessed at the verifier's clock: `verdict` arguments for it. ``tail``: the payload of its
    last two checkpoints besides their wall time (default: gpu0 with no energy outside workloads)."""
    from flopwatch.monitor.keys import load_pin
    from flopwatch.monitor.ledger import Ledger
    from flopwatch.monitor.witness import witness

    led = tmp / "node.db"
    cp = {"devices": {"gpu0": {"outside_net_energy_j": 0.0}}}
    with Ledger(led) as lg:
        lg.append("checkpoint", {"wall": W0, **cp})
        lg.append("workload", row)
        for i in range(1, 5):
            lg.append(
                "checkpoint", {"wall": row["end_wall"] + 60.0 * i, **(cp if i < 3 or tail is None else tail)}
            )
        lg.sign_head()
    log = tmp / "heads.jsonl"
    assert witness(str(led), log, load_pin(Path(f"{led}.pub")).key, clock=lambda: W0 + 600.0).ok
    return [str(led), "--witness", str(log)]


def _verdict(capsys, args: list[str], thr: float, *extra: str) -> dict[str, Any]:  # noqa: ANN001
    assert main(["verdict", *args, "--threshold", repr(thr), "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)["total"]


@pytest.mark.parametrize("extra", [[], ["--device", "h100"]], ids=["no-device", "device"])
def test_verdict_without_profile_recomputes_a_signed_bound(family, tmp_path, capsys, extra):
    """`signed-bound-understated`: a validly signed and witnessed ledger whose row states its upper bound at 0.3 ×
    the truth, warnings empty (a monitor the operator runs, or the verifier's own on an old rule). `flopwatch
    verdict` without ``--profile`` took the signed bound: "below" at 0.9 × truth. Every row is now recomputed from
    its observables; the larger bound stands and the understated one is named. The honest ledger is unchanged."""
    row, truth = _h100_row(family)
    honest_up = row["upper_flops"]
    assert honest_up >= truth
    thr = 0.9 * truth
    (tmp_path / "h").mkdir()
    h = _verdict(capsys, _signed_ledger(tmp_path / "h", row), thr, *extra)
    # the window adds its time outside the row, bounded at peak for its sensor's blind share (`outside-blind`)
    rows_up = h["upper_flops"] - h["unattributed_upper_flops"]
    assert h["verdict"] == "uncertain" and rows_up == pytest.approx(honest_up) and not h["warnings"]
    (tmp_path / "b").mkdir()  # the honest control: "below" over its bound, as before
    b = _verdict(capsys, _signed_ledger(tmp_path / "b", row), 1.01 * h["upper_flops"], *extra)
    assert b["verdict"] == "below", b["warnings"]
    (tmp_path / "t").mkdir()
    forged = {**row, "upper_flops": 0.3 * truth, "estimate_flops": 0.25 * truth}
    t = _verdict(capsys, _signed_ledger(tmp_path / "t", forged), thr, *extra)
    assert t["verdict"] == "uncertain" and t["upper_flops"] >= truth
    assert any(
        "its signed upper bound" in w and "recomputed from its observables" in w for w in t["warnings"]
    )


def test_a_row_without_observables_cannot_be_recomputed(family, tmp_path, capsys):
    """`signed-bound-understated`, observables dropped: the same forged row without its net energy and duration
    (nothing to recompute from) is named and never "below", with or without ``--profile``."""
    row, truth = _h100_row(family)
    forged = {k: v for k, v in row.items() if k not in ("net_energy_j", "duration_s")}
    forged["upper_flops"] = 0.3 * truth
    t = _verdict(capsys, _signed_ledger(tmp_path, forged), 0.9 * truth)
    assert t["verdict"] == "uncertain"
    assert any("cannot be recomputed" in w for w in t["warnings"]), t["warnings"]


def test_a_row_that_says_it_was_cut_is_never_below(family):
    """`signed-bound-understated`, status: a row whose status says the daemon stopped or the sensor failed before
    the workload ended ("interrupted", "sensor_fault") but whose warnings were stripped: the run may be longer than
    the row, so it blocks "below" (named), as the daemon's own warning did."""
    row, _ = _h100_row(family)
    for status in ("interrupted", "sensor_fault"):
        r = reassess_row({**row, "status": status}, None, "h100")
        assert any(f"has status {status!r}" in w for w in r["warnings"])
    assert not reassess_row(row, None, "h100")["warnings"]


def test_a_signed_bound_over_the_recomputed_one_stands(family):
    """The other side may widen: a signed bound over the recomputed one (or none: unbounded) stands, unnamed."""
    row, _ = _h100_row(family)
    assert reassess_row({**row, "upper_flops": 3 * row["upper_flops"]}, None, "h100")[
        "upper_flops"
    ] == pytest.approx(3 * row["upper_flops"])
    assert reassess_row({**row, "upper_flops": None}, None, "h100")["upper_flops"] is None


# ------------------------------------------------------------------------------ a run that names no device
def _nameless_capped_h100(family, a100_profile) -> tuple[WorkloadRecord, float]:  # noqa: ANN001
    """An H100 fp8 run under a 400 W cap (SIMULATED), its device names, clocks, peak and power limit left out and
    its idle baseline set to the A100 profile's."""
    acc, run = sim_run("h100", family[0], cap=400.0, dtype="fp8")
    d = to_record(acc, run).to_dict()
    for k in ("device", "device_name", "device_spec", "min_sm_clock_mhz", "max_sm_clock_mhz",
              "mean_sm_clock_mhz", "sm_clock_mhz", "peak_power_w", "power_limit_w"):  # fmt: skip
        d.pop(k, None)
    d["idle_power_w"] = a100_profile.idle_power_w
    return WorkloadRecord.from_dict(d), float(run.total_flops)


def test_a_record_naming_no_device_is_not_below_on_the_profiles_device(family, a100_profile):
    """`device-unnamed`: the record names no device, so it was judged as the A100 the profile was calibrated on,
    with no word: bound 0.97 × truth, "below" at 0.99 × truth. The profile's device is an assumption about someone
    else's run: named, never "below". The verifier's own ``--device`` is its statement and stands."""
    r, truth = _nameless_capped_h100(family, a100_profile)
    a = assess_record(a100_profile, r, threshold_flops=0.99 * truth)
    assert a.upper_flops < truth  # what the A100's physics allows is under what the H100 did
    _never_below(a, truth, "the run names no device: judged as the profile's device a100")
    h = assess_record(a100_profile, r, threshold_flops=0.99 * truth, device="h100")
    assert h.upper_flops >= truth and not any("names no device" in w for w in h.warnings)
    v = assess_record(a100_profile, r, threshold_flops=1.01 * a.upper_flops, device="a100")
    assert not any("names no device" in w for w in v.warnings)  # the verifier's --device stands


def test_a_ledger_row_naming_no_device_is_warned(family, a100_profile):
    """`device-unnamed` on a ledger row (`verdict --profile`): no ``device_name`` and no ``device``."""
    r, truth = _nameless_capped_h100(family, a100_profile)
    d = r.to_dict()
    row = {**d, "workload_id": "w", "regime": "calibrated", "upper_flops": 0.5 * truth, "warnings": []}
    out = reassess_row(row, a100_profile)
    assert any("names no device" in w for w in out["warnings"])
    assert not any("names no device" in w for w in reassess_row(row, a100_profile, "a100")["warnings"])


def test_estimate_names_a_record_without_a_device(family, a100_profile, tmp_path, capsys):
    """The same through ``flopwatch estimate``: "uncertain" and the warning in the JSON."""
    r, truth = _nameless_capped_h100(family, a100_profile)
    (tmp_path / "r.jsonl").write_text(json.dumps(r.to_dict()) + "\n")
    a100_profile.save(tmp_path / "p.json")
    assert main(["estimate", "--profile", str(tmp_path / "p.json"), str(tmp_path / "r.jsonl"), "--threshold",
                 repr(0.99 * truth), "--json"]) == 0  # fmt: skip
    d = json.loads(capsys.readouterr().out)
    (x,) = d["records"] + d.get("skipped", [])  # an fp8 run under a bf16 profile: skipped, still judged
    assert x["threshold_verdict"] == "uncertain"
    assert any("names no device" in w for w in x["warnings"])


# ------------------------------------------------------------------------------ a witness that co-signs late
def _three_day_ledger(tmp: Path, row: dict[str, Any], *, hourly_witness: bool) -> list[str]:
    """Three days of hourly checkpoints on a ledger whose heavy ``row`` is stamped two days before its end and a
    light row in its last hour; heads witnessed every hour (at once), or only at the start and at the end."""
    from flopwatch.monitor.keys import load_pin
    from flopwatch.monitor.ledger import Ledger
    from flopwatch.monitor.witness import witness

    led, log = tmp / "node.db", tmp / "heads.jsonl"
    pin = None

    def cp(w: float) -> dict[str, Any]:
        return {"wall": w, "devices": {"gpu0": {"outside_net_energy_j": 0.0}}}

    def seen(at: float) -> None:
        nonlocal pin
        with Ledger(led) as lg:
            lg.sign_head()
        pin = pin or load_pin(Path(f"{led}.pub")).key
        assert witness(str(led), log, pin, clock=lambda: at).ok

    with Ledger(led) as lg:
        lg.append("checkpoint", cp(W0))
    seen(W0 + 1)
    dur = row["duration_s"]
    light = {**row, "workload_id": "w2", "net_energy_j": 1.0, "duration_s": 10.0, "upper_flops": 3e13,
             "estimate_flops": 1e12, "pipe_active_s": dict.fromkeys(("tensor", "fp64", "fp32", "fp16"), 0.0),
             "pipe_observed_s": 10.0}  # fmt: skip
    for h in range(1, 73):
        w = W0 + 3600.0 * h
        with Ledger(led) as lg:
            if h == 24:
                lg.append("workload", {**row, "start_wall": w - dur - 10, "end_wall": w - 10})
            if h == 72:
                lg.append("workload", {**light, "start_wall": w - 20, "end_wall": w - 10})
            lg.append("checkpoint", cp(w))
        if hourly_witness or h == 72:
            seen(w + 60)
    return [str(led), "--witness", str(log)]


def test_a_late_witness_leaves_a_rows_time_open(family, tmp_path, capsys):
    """`late-witness`: the node's heads are witnessed at the ledger's start and then only three days later. A row
    is proved to exist only by the head that first covers it, so its time is the node's word anywhere before that
    sighting: the heavy run (truly in the last hour, say) stamped two days back left `--window 24h`, which held
    only a light row: "below" at 0.9 × truth. A row now counts in every window it may have ended in. With a
    witness every hour the heavy row is placed to the hour: the same window is "below" as before."""
    row, truth = _h100_row(family)
    (tmp_path / "late").mkdir()
    args = _three_day_ledger(tmp_path / "late", row, hourly_witness=False)
    assert main(["verdict", *args, "--threshold", repr(0.9 * truth), "--json", "--window", "24h"]) == 0
    d = json.loads(capsys.readouterr().out)
    t = d["total"]
    assert t["verdict"] == "uncertain" and t["n_workloads"] == 2 and t["upper_flops"] >= truth
    assert any("1 row(s) stamped before the window counted in it" in w for w in d["warnings"]), d["warnings"]
    (tmp_path / "hourly").mkdir()
    args = _three_day_ledger(tmp_path / "hourly", row, hourly_witness=True)
    # (at a threshold a day of NVML's blind 75 % outside rows allows: round 12, `outside-blind`, 1.3e20 at peak)
    assert main(["verdict", *args, "--threshold", "1e25", "--json", "--window", "24h"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["total"]["verdict"] == "below" and d["total"]["n_workloads"] == 1, d["total"]["warnings"]


# ------------------------------------------------------------------------------ energy outside workloads
def _ent(kind: str, payload: dict[str, Any]) -> Any:
    from types import SimpleNamespace

    return SimpleNamespace(kind=kind, payload=payload)


def _cps(walls: list[float], devices: dict[str, float] | None = None) -> list[Any]:
    return [_ent("checkpoint", {"wall": w, "devices": {d: {"outside_net_energy_j": j} for d, j in
                                                        (devices or {}).items()}}) for w in walls]  # fmt: skip


_START = _ent("start", {"session_id": "s1", "sensors": [{"device": "gpu0", "name": DEVICES["h100"].name}]})


def test_checkpoints_that_stop_reporting_a_device_block_below():
    """`checkpoint-drops-device`: the node's checkpoints report gpu0 (an H100) for 5 minutes, then keep coming
    with no device in them. The window took gpu0's outside energy at its last report (0 J), so 5 minutes in which
    it could have burnt a megajoule under the detector read as none: "below" 1e15 with an upper bound of 0. A
    device its node's last checkpoint no longer reports has unknown energy since: named, never "below"."""
    from flopwatch.evaluate.window import ledger_window_verdicts

    honest = [
        _START,
        *_cps([W0 + 60 * i for i in range(10)], {"gpu0": 0.0}),
    ]  # 1e25: `outside-blind` (round 12)
    assert ledger_window_verdicts(honest, threshold_flops=1e25, window_s=None)["total"]["verdict"] == "below"
    forged = [
        _START,
        *_cps([W0 + 60 * i for i in range(5)], {"gpu0": 0.0}),
        *_cps([W0 + 300 + 60 * i for i in range(5)]),
    ]
    t = ledger_window_verdicts(forged, threshold_flops=1e25, window_s=None)["total"]
    assert t["verdict"] == "uncertain"
    assert any("no longer reports device(s) gpu0" in w for w in t["warnings"]), t["warnings"]
    # gpu0 listed in the last checkpoints with no value (null, or no energy key): it reports nothing either
    for v in (None, {}):
        tail = [_ent("checkpoint", {"wall": W0 + 300 + 60 * i, "devices": {"gpu0": v}}) for i in range(5)]
        t = ledger_window_verdicts([*forged[:-5], *tail], threshold_flops=1e25, window_s=None)["total"]
        assert any("no longer reports device(s) gpu0" in w for w in t["warnings"]), (v, t["warnings"])
    # the node names its last checkpoints another node's: only `verdict` over several ledgers names nodes
    for e in forged[-5:]:
        e.payload["node"] = "elsewhere"
    t = ledger_window_verdicts(forged, threshold_flops=1e25, window_s=None)["total"]
    assert any("no longer reports device(s) gpu0" in w for w in t["warnings"]), t["warnings"]


def test_a_node_that_drops_its_device_is_named_among_several(family, tmp_path, capsys):
    """`checkpoint-drops-device` over two ledgers (`flopwatch verdict a.db b.db`): each node's checkpoints are
    judged against its own devices — node b dropping gpu0 is named, node a (honest) is not; two honest nodes
    are "below" together."""
    row, _ = _h100_row(family)
    up = row["upper_flops"]
    args = []
    for name, wid, tail in (("a", "w1", None), ("b", "w2", {"devices": {}})):
        (tmp_path / name).mkdir()
        led, _, log = _signed_ledger(tmp_path / name, {**row, "workload_id": wid}, tail)
        args.append((led, log))
    both = [args[0][0], args[1][0], "--witness", args[0][1], "--witness", args[1][1]]
    t = _verdict(capsys, both, 2.02 * up)
    assert t["verdict"] == "uncertain"
    drop = [w for w in t["warnings"] if "no longer reports" in w]
    # both ledgers are named node.db: verdict labels them node.db#1 (a) and node.db#2 (b)
    assert len(drop) == 1 and "node.db#2/gpu0" in drop[0] and "node.db#1/gpu0" not in drop[0], drop
    (tmp_path / "c").mkdir()
    led, _, log = _signed_ledger(tmp_path / "c", {**row, "workload_id": "w3"})
    ok = _verdict(
        capsys, [args[0][0], led, "--witness", args[0][1], "--witness", log], 1e25
    )  # `outside-blind`
    assert ok["verdict"] == "below", ok["warnings"]


def test_outside_energy_of_a_device_nobody_names_is_not_bounded_as_the_profiles_without_a_word(a100_profile):
    """`device-unnamed`, outside workloads (`verdict --profile`): checkpoints report 4 MJ outside workloads on
    gpu1, a device no row and no start row names. It was bounded by the A100 profile's η_max with no word: "below"
    1.5 × what an A100 can do with 4 MJ, though an H100 does 2.4 × that. Named now, never "below"; the verifier's
    ``--device h100`` states it (and bounds it as an H100)."""
    from flopwatch.devices import get_device
    from flopwatch.estimate.sound import device_basis
    from flopwatch.evaluate.window import ledger_window_verdicts

    ents = [_START, *_cps([W0 + 60 * i for i in range(5)], {"gpu0": 0.0, "gpu1": 0.0}),
            *_cps([W0 + 300 + 60 * i for i in range(5)], {"gpu0": 0.0, "gpu1": 4e6})]  # fmt: skip
    thr = 1.5 * 4e6 * device_basis(get_device("a100")).eta(None)
    assert thr < 4e6 * device_basis(get_device("h100")).eta(None)
    t = ledger_window_verdicts(ents, threshold_flops=thr, window_s=None, profile=a100_profile)["total"]
    assert t["verdict"] == "uncertain"
    assert any("device gpu1 is named by no row" in w for w in t["warnings"]), t["warnings"]
    h = ledger_window_verdicts(ents, threshold_flops=thr, window_s=None, profile=a100_profile, device="h100")
    assert h["total"]["upper_flops"] >= 4e6 * device_basis(get_device("h100")).eta(None) * 0.999
    # the honest control: gpu1 named by the start row, as the daemon writes it
    named = _ent("start", {"session_id": "s1", "sensors": [{"device": "gpu0", "name": DEVICES["h100"].name},
                                                             {"device": "gpu1", "name": DEVICES["a100"].name}]})  # fmt: skip
    ok = ledger_window_verdicts([named, *ents[1:]], threshold_flops=thr, window_s=None, profile=a100_profile)
    assert ok["total"]["verdict"] == "below", ok["total"]["warnings"]


def test_a_signed_estimate_over_the_recomputed_bound_is_named(family, tmp_path, capsys):
    """`pipes-zeroed` (no ``--profile``): the row's pipe counters set to 0 and its signed bound to what they give
    (0.009 × truth), its signed estimate left at the truth. The recomputed bound agrees with the forged one, but the
    row's own estimate exceeds it: two views of one run that disagree, named (as ``assess`` names a calibrated
    estimate over the bound), never "below". A row whose signed estimate is forged down too is consistent: only
    ``--profile`` (the verifier's estimate from the energy) or attestation of the counters names it."""
    row, truth = _h100_row(family)
    zero = dict.fromkeys(("tensor", "fp64", "fp32", "fp16"), 0.0)
    forged = {**row, "pipe_active_s": zero}
    forged["upper_flops"] = reassess_row({**forged, **forged["context"], "regime": None}, None, "h100")[
        "upper_flops"
    ]
    assert forged["upper_flops"] < 0.05 * truth
    t = _verdict(capsys, _signed_ledger(tmp_path, forged), 0.9 * truth)
    assert t["verdict"] == "uncertain"
    assert any("its signed estimate" in w and "exceeds the sound upper bound" in w for w in t["warnings"])


def test_a_row_of_an_unknown_kind_blocks_below(family, tmp_path, capsys):
    """`row-kind-unknown`: the node signs its heavy run as a row of kind "Workload" (or "job"): the window read only
    "workload" rows and skipped it, with no word ("below" at 0.9 × truth, no row in the window). A row of a kind
    the verdict does not know holds something it does not judge: named, never "below"."""
    from flopwatch.evaluate.window import LEDGER_KINDS
    from flopwatch.monitor.keys import load_pin
    from flopwatch.monitor.ledger import Ledger
    from flopwatch.monitor.ledger_format import KINDS
    from flopwatch.monitor.witness import witness

    assert tuple(KINDS) == LEDGER_KINDS  # the window's copy of the ledger's kinds
    row, truth = _h100_row(family)
    led, log = tmp_path / "n.db", tmp_path / "h.jsonl"
    cp = {"devices": {"gpu0": {"outside_net_energy_j": 0.0}}}
    with Ledger(led) as lg:
        lg.append("checkpoint", {"wall": W0, **cp})
        lg.append("Workload", row)
        for i in range(1, 5):
            lg.append("checkpoint", {"wall": row["end_wall"] + 60.0 * i, **cp})
        lg.sign_head()
    assert witness(str(led), log, load_pin(Path(f"{led}.pub")).key, clock=lambda: W0 + 600.0).ok
    t = _verdict(capsys, [str(led), "--witness", str(log)], 0.9 * truth)
    assert t["verdict"] == "uncertain" and t["n_workloads"] == 0
    assert any("of a kind the verdict does not know ('Workload')" in w for w in t["warnings"]), t["warnings"]
