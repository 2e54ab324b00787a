"""A second PromQL engine: ``fleet estimate`` against VictoriaMetrics gives Prometheus's answers (issue 22, item 10).

The simulated fleets (simulated, not measured) are written once as OpenMetrics; Prometheus gets them through promtool
backfill (as ``tests/test_fleet_prometheus.py`` does), VictoriaMetrics (Debian package ``victoria-metrics``, single
node, started here on loopback) through its Prometheus text import (``/api/v1/import/prometheus``, timestamps in
milliseconds). Both serve the same samples; every group of the estimate must come out the same, field by field.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from prom_helpers import LocalPrometheus, backfill, find_tool, free_port

VM = shutil.which("victoria-metrics")
pytestmark = [
    pytest.mark.skipif(VM is None, reason="needs victoria-metrics (Debian package 'victoria-metrics')"),
    pytest.mark.skipif(
        find_tool("promtool") is None or find_tool("prometheus") is None,
        reason="needs promtool and prometheus (Debian package 'prometheus') to compare against",
    ),
]

WALL0 = 1_700_000_000.0


class LocalVictoria:
    """``victoria-metrics`` on 127.0.0.1 over ``data_dir`` (context manager; the process is always stopped)."""

    def __init__(self, data_dir: Path, *, ready_timeout_s: float = 60.0) -> None:
        self.data_dir = data_dir
        self.ready_timeout_s = ready_timeout_s
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LocalVictoria:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for _attempt in range(3):  # a free port can be taken between probing and binding
            self.port = free_port()
            log = (self.data_dir / "vm.log").open("wb")
            self.proc = subprocess.Popen(
                [
                    str(VM),
                    f"-httpListenAddr=127.0.0.1:{self.port}",
                    f"-storageDataPath={self.data_dir / 'data'}",
                    "-retentionPeriod=100y",  # the simulated timestamps are years old
                    "-search.disableCache",  # data is imported after start: no cached empty answers
                    "-loggerLevel=ERROR",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            log.close()
            deadline = time.monotonic() + self.ready_timeout_s
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                        if r.status == 200:
                            return self
                except (urllib.error.URLError, OSError):
                    time.sleep(0.1)
            self.__exit__()
        raise RuntimeError(f"victoria-metrics did not start: {(self.data_dir / 'vm.log').read_text()[-800:]}")

    def __exit__(self, *exc: object) -> None:
        p, self.proc = self.proc, None
        if p is not None:
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=20)

    def import_openmetrics(self, path: Path, *, batch_lines: int = 100_000) -> int:
        """Import an OpenMetrics file (seconds) as Prometheus text (milliseconds); returns the samples sent."""
        n = 0
        buf: list[str] = []

        def post() -> None:
            req = urllib.request.Request(
                f"{self.url}/api/v1/import/prometheus", data="".join(buf).encode(), method="POST"
            )
            with urllib.request.urlopen(req, timeout=300) as r:
                r.read()
            buf.clear()

        with path.open() as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                series, value, ts = line.rsplit(" ", 2)
                buf.append(f"{series} {value} {round(float(ts) * 1000)}\n")
                n += 1
                if len(buf) >= batch_lines:
                    post()
        if buf:
            post()
        with urllib.request.urlopen(f"{self.url}/internal/force_flush", timeout=60) as r:  # searchable now
            r.read()
        return n


def _fleet(name: str) -> Any:
    from flopwatch.sim.dcgm import SimulatedFleet, load_fleet_schedule, random_schedule

    if name == "A":  # tests/test_fleet_prometheus.py's fleet A: counter resets, 2 % of scrapes missing
        from test_fleet_prometheus import JOBS_A

        return 2.0, lambda d: SimulatedFleet(
            12,
            2.0,
            load_fleet_schedule(_write(d / "jobs.json", {"jobs": JOBS_A})),
            device="h100",
            gpus_per_node=4,
            wall0=WALL0,
            seed=1,
            resets=1,
            drop=0.02,
        )
    n = int(name)
    return 1.0, lambda d: SimulatedFleet(
        n,
        1.0,
        random_schedule(n, 1.0, gpus_per_node=8, seed=7),
        device="h100",
        gpus_per_node=8,
        wall0=WALL0,
        seed=7,
    )


def _write(p: Path, doc: Any) -> Path:
    p.write_text(json.dumps(doc))
    return p


@pytest.fixture(scope="module", params=["A", "16", "256"])
def engines(request, tmp_path_factory):
    hours, make = _fleet(request.param)
    d = tmp_path_factory.mktemp(f"vm{request.param}")
    om = d / "fleet.om"
    make(d).write_openmetrics(om)
    backfill(om, d / "tsdb")
    with LocalPrometheus(d / "tsdb") as prom, LocalVictoria(d / "vm") as vm:
        assert vm.import_openmetrics(om) > 0
        om.unlink()  # up to 265 MB at 256 GPUs: not kept while the estimates run
        yield request.param, hours, prom.url, vm.url


def _estimate(url: str, hours: float) -> dict[str, dict[str, Any]]:
    from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet

    # chunks as the plan picks them: the largest within both engines' limits (VictoriaMetrics's 16 KiB query
    # length among them; before issue 22 a 256-GPU chunk sent a 21,325-byte query and was refused, HTTP 422)
    plan = ReadPlan(WALL0, WALL0 + hours * 3600, window_s=1800)
    res = estimate_fleet(PrometheusClient(url, timeout_s=120), plan, by="pod")
    return {g["key"]: g for g in res.groups}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_victoriametrics_gives_prometheus_answers(engines):
    name, hours, prom_url, vm_url = engines
    want = _estimate(prom_url, hours)
    got = _estimate(vm_url, hours)
    assert want and set(got) == set(want)
    assert sum(g["energy_j"] for g in want.values()) > 0  # the fleet was read, not two empty answers compared
    for key, g in want.items():
        diff = {k: (g[k], got[key].get(k)) for k in g if not _same(g[k], got[key].get(k))}
        assert not diff, (key, diff)
