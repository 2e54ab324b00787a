"""The monitor's metrics are collected at scrape from the accounts' totals (issue 24 item 4, issue 25 item 7).

A client_python custom collector reads every device's totals under the daemon's lock (as client_python's
ProcessCollector and Kepler do) instead of ~14 updates pushed from inside the accounting's arithmetic; counters
continue across restarts because the totals do. SIMULATED A100 (flopwatch.sim, virtual clock, seeded).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from prometheus_client import generate_latest

from flopwatch.monitor import Monitor, MonitorConfig
from flopwatch.sim.sensor import from_spec
from monitor_helpers import private_tmp  # noqa: F401 - autouse: temporary files under tmp_path

_JOB = {"label": "j", "flops_per_step": 2e12, "bytes_per_step": 2e9, "tokens_per_step": 8192, "batch_size": 16,
        "dtype": "fp32", "steps": 200}  # fmt: skip


def _value(text: str, name: str, device: str) -> float:
    m = re.search(rf'^{name}{{device="{re.escape(device)}"}} (\S+)$', text, re.M)
    assert m is not None, (name, text[:3000])
    return float(m.group(1))


def _run(ledger: Path, seed: int) -> Monitor:
    sensors = from_spec("a100", seed=seed, schedule=[{"idle_s": 10}, _JOB, {"idle_s": 20}])
    mon = Monitor(MonitorConfig(sensors=["sim:a100"], ledger=ledger, duration_s=60.0), sensors=sensors)
    mon.run(install_signals=False)
    return mon


def test_metrics_are_the_totals_at_scrape_and_continue_across_a_restart(tmp_path: Path) -> None:
    led = tmp_path / "ledger.db"
    first = _run(led, 1)
    (dev,) = first.accounts
    text = generate_latest(first.metrics.registry).decode()
    t = first.accounts[dev].totals
    assert _value(text, "flopwatch_energy_joules_total", dev) == t.energy_j > 0
    assert _value(text, "flopwatch_sensor_errors_total", dev) == t.sensor_errors
    assert f'flopwatch_workloads_total{{device="{dev}",status="complete"}} 1.0' in text
    assert _value(text, "flopwatch_workload_active", dev) == 0.0
    e1 = t.energy_j

    second = _run(led, 2)  # a restart on the same ledger: the counter continues from the checkpointed totals
    text2 = generate_latest(second.metrics.registry).decode()
    e2 = _value(text2, "flopwatch_energy_joules_total", dev)
    assert e2 == second.accounts[dev].totals.energy_j
    assert e2 > e1 * 1.5  # both sessions' energy, not the second alone


def test_the_accounting_pushes_no_metric() -> None:
    from flopwatch.monitor import accounting

    src = inspect.getsource(accounting)
    assert "metrics." not in src and "MonitorMetrics" not in src
