"""A real Prometheus server scrapes the daemon's exporter and answers PromQL (skipped without the binary)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from flopwatch.monitor.config import MonitorConfig
from flopwatch.monitor.daemon import Monitor
from flopwatch.telemetry.sensors.replay import open_replay
from monitor_helpers import (  # noqa: F401 - private_tmp: autouse, temporary files under tmp_path
    P_BUSY_W,
    P_IDLE_W,
    LinearProfile,
    busy_fn,
    private_tmp,
    write_trace,
)

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None,
    reason="Prometheus server binary not found (Debian: apt-get install prometheus; .ci/run installs it)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 2.0) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
        return None


def _query(prom_port: int, promql: str) -> list[dict]:
    doc = _get(f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    if not doc or doc.get("status") != "success":
        return []
    return doc["data"]["result"]


def test_prometheus_scrapes_the_daemon_and_answers_promql(tmp_path: Path) -> None:
    # A long synthetic run replayed at 5x: busy from t=4 s, so counters grow while Prometheus scrapes.
    trace = write_trace(tmp_path / "t.parquet", t_total=3000, busy=busy_fn([(4, 3000)]))
    metrics_port, prom_port = _free_port(), _free_port()
    cfg = MonitorConfig(
        sensors=["replay:(given)"],
        ledger=tmp_path / "ledger.db",
        metrics_port=metrics_port,
        metrics_addr="127.0.0.1",
    )
    mon = Monitor(cfg, sensors=open_replay(trace, speed=5.0), profile=LinearProfile())
    th = threading.Thread(target=lambda: mon.run(install_signals=False), daemon=True)
    th.start()

    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: flopwatch\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
    )
    prom = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("w"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60.0
        flops = energy = up = []
        while time.monotonic() < deadline:
            assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            up = _query(prom_port, 'up{job="flopwatch"}')
            # The fleet-wide query of docs/monitor.md.
            flops = _query(prom_port, "sum(flopwatch_estimated_flops_total)")
            energy = _query(prom_port, "sum by (device) (flopwatch_energy_joules_total)")
            if up and flops and float(flops[0]["value"][1]) > 0 and energy:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"Prometheus did not report flopwatch metrics in 60 s (up={up}, flops={flops})")
        assert float(up[0]["value"][1]) == 1.0
        total_flops = float(flops[0]["value"][1])
        print(f"PromQL sum(flopwatch_estimated_flops_total) = {total_flops:.4g}; energy {energy}")
        assert energy[0]["metric"]["device"] == "synthetic:0" and float(energy[0]["value"][1]) > 0
        # One scrape holds both series, so this PromQL compares one moment of the daemon: LinearProfile charges
        # 1e-10 J per FLOP of busy net energy, and the FLOPs total is refreshed every 1.5 s poll while energy is
        # integrated every reading, so FLOPs/1e10 may trail the energy by at most one poll at +200 W.
        lag = _query(
            prom_port, "sum(flopwatch_net_energy_joules_total) - sum(flopwatch_estimated_flops_total) / 1e10"
        )
        assert lag and -1.0 <= float(lag[0]["value"][1]) <= 1.5 * (P_BUSY_W - P_IDLE_W) * 1.5
        info = _query(prom_port, "flopwatch_info")
        assert info and info[0]["metric"]["model"] == "linear-test"
        active = _query(prom_port, "max(flopwatch_workload_active)")
        assert active and float(active[0]["value"][1]) in (0.0, 1.0)
    finally:
        prom.terminate()
        try:
            prom.wait(timeout=10)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait(timeout=10)
        mon.stop("test done")
        th.join(timeout=30)
    assert not th.is_alive()
