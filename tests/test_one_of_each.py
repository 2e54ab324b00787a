"""One of each small thing (issue 24 item 3): the finite-number check, the JSON-safe converter, the name → spec
resolver, the exclusive atomic write, and the study's route without its bounces (issue 24 item 6)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from flopwatch.devices import get_device, resolve
from flopwatch.errors import InputError
from flopwatch.io import atomic_write, jsonable
from flopwatch.units import finite


def test_finite() -> None:
    assert finite(3) == 3.0 and finite(np.float32(2.5)) == 2.5 and finite(np.int64(7)) == 7.0
    for bad in (True, None, "3", math.nan, math.inf, -math.inf, 10**400, [1.0]):
        assert finite(bad) is None, bad


def test_jsonable_is_strict_json() -> None:
    @dataclass
    class P:
        x: float

    class R:
        def to_dict(self) -> dict[str, object]:
            return {"nan": math.nan}

    obj = {1: (np.float64(1.5), np.int32(2)), "a": np.array([1.0, np.nan]), "p": Path("/x"), "d": P(math.inf)}
    obj["r"] = R()
    assert json.loads(json.dumps(jsonable(obj), allow_nan=False)) == {
        "1": [1.5, 2],
        "a": [1.0, None],
        "p": "/x",
        "d": {"x": None},
        "r": {"nan": None},
    }


def test_resolve_is_the_one_name_to_spec_lookup() -> None:
    a100 = get_device("a100")
    assert resolve("sim:a100#0") == resolve("sim:a100:1") == resolve("A100 (simulated)") == a100
    assert resolve(None, "", "jetson:VDD_CPU_GPU_CV", "NVIDIA H200").key == "h200"  # first known name wins
    assert resolve(a100) is a100 and resolve("nosuch") is None
    assert resolve("cpu").vendor == "cpu" and resolve("cpu", cpu=False) is None
    from flopwatch.estimate.bounds import resolve_device

    assert resolve_device("cpu", "sim:h100#0").key == "h100"


def test_an_exclusive_write_never_replaces(tmp_path: Path) -> None:
    p = tmp_path / "k.key"
    atomic_write(p, b"secret", perms=0o600, exclusive=True)
    assert p.read_bytes() == b"secret" and (p.stat().st_mode & 0o777) == 0o600
    with pytest.raises(InputError, match="refusing to replace"):
        atomic_write(p, b"other", exclusive=True)
    assert p.read_bytes() == b"secret" and sorted(x.name for x in tmp_path.iterdir()) == ["k.key"]


def test_the_planner_predicts_utilisation_from_the_roofline_alone() -> None:
    """``roofline`` (no power model, no MASCOTS fit) gives the twin's utilisation at the maximum clock."""
    from flopwatch.sim.accelerator import SimulatedAccelerator, roofline
    from flopwatch.sim.validate import gpt2xl_workload

    acc = SimulatedAccelerator("a100")
    for batch in (1, 8, 64):
        w = gpt2xl_workload(batch)
        assert roofline(acc.spec, w).util == pytest.approx(acc.operating_point(w).util, rel=1e-12)


def test_trace_rows_come_from_the_footer(tmp_path: Path) -> None:
    """``run`` counts a Parquet trace's rows from its footer (less the duplicates detection's pass dropped)."""
    from flopwatch.pipeline.analyse import trace_rows
    from flopwatch.telemetry.schema import Reading
    from flopwatch.telemetry.source import open_source
    from flopwatch.telemetry.trace import Trace

    rs = [Reading(float(t), 1.7e9 + t, "d", 100.0, util=0.5) for t in range(50)]
    path = Trace.from_readings([*rs, rs[10]]).write(tmp_path / "t.parquet")  # one identical repeated sample
    src = open_source(path)
    assert src.num_rows == 51
    for _ in src.chunks():  # the validated pass (detection's) drops the repeat
        pass
    assert trace_rows(src) == len(Trace.read(path)) == 50
