"""The amdsmi backend against the installed amdsmi package's real API (names, enums, dict keys).

The package cannot be imported without ROCm's libamd_smi.so, so its source is read instead: every function
and enum the backend calls must be exported by ``amdsmi/__init__.py`` and defined in
``amdsmi_interface.py``, and every dict key the backend reads must be one that interface returns.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from flopwatch.telemetry.sensors.amd import open_amd
from flopwatch.telemetry.sensors.base import VirtualClock
from vendor_fakes import DATA, FakeAmdSmi

BACKEND = Path(__file__).parents[1] / "src/flopwatch/telemetry/sensors/amd.py"


def _package_dir() -> Path:
    spec = importlib.util.find_spec("amdsmi")  # locates the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("amdsmi package not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def test_backend_calls_exist_in_installed_amdsmi() -> None:
    pkg = _package_dir()
    init = ast.parse((pkg / "__init__.py").read_text())
    exported = {
        a.asname or a.name for node in ast.walk(init) if isinstance(node, ast.ImportFrom) for a in node.names
    }
    iface_src = (pkg / "amdsmi_interface.py").read_text()
    iface = ast.parse(iface_src)
    classes = {n.name: n for n in iface.body if isinstance(n, ast.ClassDef)}

    src = BACKEND.read_text()
    calls = set(re.findall(r"\b(?:m|self\._m)\.(amdsmi_\w+)", src))
    assert {"amdsmi_get_power_info", "amdsmi_get_energy_count", "amdsmi_get_gpu_activity"} <= calls
    assert sorted(calls - exported) == []
    # Enums and members passed to amdsmi_get_clock_info / amdsmi_get_temp_metric.
    for cls, member in re.findall(r"m\.(AmdSmi\w+)\.(\w+)", src):
        assert cls in exported and cls in classes, cls
        members = {t.id for st in classes[cls].body if isinstance(st, ast.Assign) for t in st.targets}
        assert member in members, f"{cls}.{member}"
    # Exception classes the backend catches.
    exc_src = (pkg / "amdsmi_exception.py").read_text()
    for name in re.findall(r'"(AmdSmi\w*Exception)"', src):
        assert f"class {name}(" in exc_src, name
    # Dict keys the backend reads are keys the interface returns ("power": ROCm < 6.1, not in this release).
    keys = set(re.findall(r'\.get\("(\w+)"', src)) | set(re.findall(r'"(\w*socket_power)"', src))
    returned = set(re.findall(r'["\'](\w+)["\']\s*:', iface_src))
    assert {"current_socket_power", "energy_accumulator", "counter_resolution", "gfx_activity"} <= keys
    assert sorted(keys - returned - {"power", "market_name"}) == []
    assert '"market_name"' in iface_src


def test_all_ones_unsupported_markers_are_not_readings() -> None:
    """A uint32 field left at 0xFFFFFFFF means "not supported", not 4.3 GW."""
    m = FakeAmdSmi(DATA / "amdsmi" / "mi300x_rocm62.json")
    m.devs[0]["power"] = [
        {"current_socket_power": 0xFFFFFFFF, "average_socket_power": 651, "power_limit": 750}
    ]
    m.devs[0]["activity"] = [{"gfx_activity": 97, "umc_activity": 0xFFFFFFFF, "mm_activity": "N/A"}]
    (s,) = open_amd(amdsmi=m, clock=VirtualClock())
    r = s.read()
    assert r.power_w == 651 and r.util == 0.97 and r.mem_util is None
    s.close()


def test_amd_accumulator_reset_is_bridged_with_power_and_flagged() -> None:
    """A GPU reset restarts the accumulator: that interval comes from power, flagged; never a negative step."""
    m = FakeAmdSmi(DATA / "amdsmi" / "mi300x_rocm62.json")
    e = m.devs[0]["energy"]
    m.devs[0]["energy"] = [e[0], e[1], {**e[2], "energy_accumulator": 1000}]  # third read after a reset
    clk = VirtualClock()
    (s,) = open_amd(amdsmi=m, clock=clk)
    rs = []
    for _ in range(3):
        rs.append(s.read())
        clk.advance(0.5)
    assert "energy_reset" not in rs[1].extra and rs[2].extra["energy_reset"] == 1.0
    assert rs[2].energy_j - rs[1].energy_j == pytest.approx(0.5 * (688 + 702) * 0.5)
    s.close()
