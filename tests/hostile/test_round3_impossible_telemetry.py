"""Round 3: physically impossible telemetry is flagged in `detect`, `join`, `estimate` and the monitor, and
blocks "below" (issue 25: `join` accepted a trace at 100 % utilisation and exactly idle power all along, and
the record got ≈ 0 J with no warning). Traces come from flopwatch.sim (SIMULATED, seeded) and are then made to
lie the way a sensor could: power pinned at idle, utilisation at 0 under power, a frozen energy counter.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sim_jobs import SIM_JOB

from flopwatch.cli import main
from flopwatch.detect import detect_workloads
from flopwatch.telemetry.consistency import ConsistencyCheck

IDLE_A100_W = 48.4  # devices.py: the simulated A100's idle
_JOB = dict(
    SIM_JOB, steps=1000
)  # about 140 s on the simulated A100: longer than the 60 s a dark stretch needs


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("sim")
    (d / "s.json").write_text(json.dumps([{"idle_s": 60}, _JOB, {"idle_s": 200}]))
    args = ["sim", "trace", "a100", "--schedule", str(d / "s.json"), "-o", str(d / "t.parquet")]
    assert main([*args, "--records", str(d / "r.jsonl"), "--rate", "4"]) == 0
    return d / "t.parquet", d / "r.jsonl"


def _lie(src: Path, dst: Path, edit: Any) -> Path:
    t = pq.read_table(src)
    cols = {n: t.column(n).to_numpy(zero_copy_only=False) for n in t.schema.names}
    edit(cols)
    out = pa.table({n: pa.array(v, type=t.schema.field(n).type) for n, v in cols.items()})
    pq.write_table(out.replace_schema_metadata(t.schema.metadata), dst)
    return dst


def _idle_power(c: dict[str, np.ndarray]) -> None:  # 100 % busy at exactly idle power, counter to match
    c["power_w"] = np.full(c["t_s"].size, IDLE_A100_W)
    c["energy_j"] = IDLE_A100_W * c["t_s"]


def _dark(c: dict[str, np.ndarray]) -> None:  # utilisation reads 0 while the job draws its power
    c["util"] = np.zeros(c["t_s"].size)


def _frozen_counter(c: dict[str, np.ndarray]) -> None:  # the counter stops while the job runs
    e, t, u = c["energy_j"].copy(), c["t_s"], c["util"]
    busy = np.flatnonzero(u > 0.5)
    e[busy[0] :] = e[busy[0]]
    e[busy[-1] + 1 :] += e[busy[-1] + 1] - e[busy[0]] if busy[-1] + 1 < e.size else 0.0
    c["energy_j"] = np.maximum.accumulate(e)
    assert t.size == e.size


def test_honest_simulated_traces_raise_no_flag(honest: tuple[Path, Path], tmp_path: Path) -> None:
    det = detect_workloads(honest[0])
    assert det.segments and not det.warnings and not any(s.warnings for s in det.segments)
    for key in ("h100", "l4", "orin-nano"):
        (tmp_path / "s.json").write_text(json.dumps([{"idle_s": 20}, dict(_JOB, steps=60), {"idle_s": 30}]))
        out = tmp_path / f"{key}.parquet"
        assert main(["sim", "trace", key, "--schedule", str(tmp_path / "s.json"), "-o", str(out)]) == 0
        det = detect_workloads(out)
        assert not det.warnings and not any(s.warnings for s in det.segments), key


@pytest.mark.parametrize(
    "edit, words",
    [(_idle_power, "utilisation without power"), (_dark, "power without utilisation"),
     (_frozen_counter, "energy counter flat under load")],
)  # fmt: skip
def test_detect_flags_impossible_telemetry(
    honest: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any, words: str
) -> None:
    lie = _lie(honest[0], tmp_path / "lie.parquet", edit)
    assert main(["detect", str(lie)]) == 0
    assert words in capsys.readouterr().out


def test_join_puts_the_warning_on_the_record_and_estimate_is_never_below(
    honest: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from flopwatch.estimate.verdict import assess_record
    from flopwatch.records import load_records, telemetry_warnings

    lie = _lie(honest[0], tmp_path / "lie.parquet", _idle_power)
    out = tmp_path / "joined.jsonl"
    assert main(["join", str(lie), str(honest[1]), "-o", str(out)]) == 0
    assert "utilisation without power" in capsys.readouterr().out
    (rec,) = load_records(out)
    assert any("utilisation without power" in w for w in telemetry_warnings(rec))
    # the record's own warning reaches the verdict (any warning blocks "below": threshold_verdict)
    from flopwatch.redteam.simulated import datacenter_family, sim_profile

    prof = sim_profile("a100", datacenter_family("fp32", quick=True), "fp32")
    clean = dataclasses.replace(rec, extra={k: v for k, v in rec.extra.items() if k != "telemetry_warnings"})
    a_clean = assess_record(prof, clean, threshold_flops=1e30)
    a_lie = assess_record(prof, rec, threshold_flops=1e30)
    assert a_lie.verdict != "below"
    assert any("utilisation without power" in w for w in a_lie.warnings)
    assert not any("utilisation without power" in w for w in a_clean.warnings)


def test_the_monitor_flags_a_sensor_that_reads_idle_under_load(tmp_path: Path) -> None:
    from flopwatch.monitor.accounting import AccountPorts, AccountSettings, DeviceAccount, DeviceContext
    from flopwatch.monitor.rows import Assessment
    from flopwatch.sim.sensor import from_spec

    def run(lying: bool) -> Any:
        s = from_spec("a100", seed=1, schedule=[{"idle_s": 10}, _JOB, {"idle_s": 30}])[0]
        rows: list = []
        ports = AccountPorts(assess=lambda m: Assessment(), emit_row=rows.append, checkpoint=lambda r: None)
        acc = DeviceAccount(
            DeviceContext(device="gpu0", spec=s.accelerator.spec),
            AccountSettings(session_id="x", sample_hz=2.0, idle_power_w=IDLE_A100_W),
            ports,
        )
        for i in range(2 * 180):
            s.clock.sleep_until(i / 2)
            r = s.read()
            if lying:
                r = dataclasses.replace(r, power_w=IDLE_A100_W, energy_j=IDLE_A100_W * r.t_s)
            acc.on_reading(r)
        assert len(rows) == 1
        return rows[0]

    assert not any("physically impossible" in w for w in run(False).warnings)
    row = run(True)
    assert any("utilisation without power" in w for w in row.warnings), row.warnings


def test_the_check_streams_in_pieces_as_in_one() -> None:
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.uniform(0.05, 0.6, 2000))
    p = np.where(t < 500, 50.5, 300.0)  # busy at idle power, then power with utilisation 0
    u = np.where(t < 500, 0.9, 0.0)
    e = np.cumsum(p * 0.3)
    e[(t > 200) & (t < 230)] = e[np.searchsorted(t, 200)]
    e = np.maximum.accumulate(e)
    u[(rng.random(t.size) < 0.01) & (t < 150)] = np.nan  # missing values
    whole, parts, one = ConsistencyCheck(50.0), ConsistencyCheck(50.0), ConsistencyCheck(50.0)
    whole.feed(t, p, u, e)
    for k in np.array_split(np.arange(t.size), 37):
        parts.feed(t[k], p[k], u[k], e[k])
    for x in zip(t.tolist(), p.tolist(), u.tolist(), e.tolist(), strict=True):
        one.feed(*x)  # the monitor's per-reading path
    assert whole.problems() == parts.problems() == one.problems() and len(whole.problems()) == 3
    for c in (parts, one):
        assert (whole.loaded_s, whole.dark_max_s, whole.flat_max_s) == pytest.approx(
            (c.loaded_s, c.dark_max_s, c.flat_max_s)
        )
