"""Test infrastructure (not part of the fleet wing): a throwaway Prometheus on loopback over backfilled blocks,
for the tests and benchmarks of simulated fleets.

``backfill(openmetrics_file, tsdb_dir)`` runs ``promtool tsdb create-blocks-from openmetrics``;
``LocalPrometheus(tsdb_dir).start()`` serves it on 127.0.0.1 at a free port with a retention long enough for
old timestamps, waits (bounded) for ``/-/ready``, and ``stop()`` always terminates the process it started.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

from flopwatch.errors import SensorUnavailable


def find_tool(name: str) -> str | None:
    return shutil.which(name) or (f"/usr/bin/{name}" if os.access(f"/usr/bin/{name}", os.X_OK) else None)


def backfill(
    openmetrics: str | os.PathLike[str], tsdb_dir: str | os.PathLike[str], *, timeout_s: float = 600
) -> None:
    """Backfill an OpenMetrics file into TSDB blocks under ``tsdb_dir`` with promtool."""
    tool = find_tool("promtool")
    if tool is None:
        raise SensorUnavailable("promtool not found (Debian/Ubuntu: apt-get install prometheus)")
    Path(tsdb_dir).mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        [tool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(tsdb_dir)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if r.returncode != 0:
        raise RuntimeError(f"promtool failed ({r.returncode}): {r.stderr.strip()[-500:]}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalPrometheus:
    """``prometheus`` serving ``tsdb_dir`` on 127.0.0.1 (context manager; the process is always killed)."""

    def __init__(self, tsdb_dir: str | os.PathLike[str], *, ready_timeout_s: float = 60.0) -> None:
        self.tsdb_dir = Path(tsdb_dir)
        self.ready_timeout_s = ready_timeout_s
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalPrometheus:
        tool = find_tool("prometheus")
        if tool is None:
            raise SensorUnavailable("prometheus not found (Debian/Ubuntu: apt-get install prometheus)")
        cfg = self.tsdb_dir / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
        self._log = self.tsdb_dir / "prometheus.log"
        for _attempt in range(3):  # a free port can be taken between probing and binding
            self.port = free_port()
            with open(self._log, "wb") as log:
                self.proc = subprocess.Popen(
                    [
                        tool,
                        f"--config.file={cfg}",
                        f"--storage.tsdb.path={self.tsdb_dir}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                        "--storage.tsdb.retention.time=100y",  # backfilled timestamps are years old
                        "--query.lookback-delta=5m",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if self._wait_ready():
                return self
            self.stop()
        raise RuntimeError(f"prometheus did not become ready: {self._tail()}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        return False

    def _tail(self) -> str:
        try:
            return (self._log.read_text()[-800:] if self._log else "").strip()
        except OSError:
            return ""

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
