"""Prometheus exposition of the daemon's live state (prometheus-client, own registry, no globals).

Metric names follow the Prometheus naming guide (base units, ``_total`` for counters, ``_ratio`` for 0–1):

=========================================== ======= =====================================================
``flopwatch_energy_joules_total{device}``    counter gross energy measured since the ledger began
``flopwatch_power_watts{device}``            gauge   latest power reading
``flopwatch_utilization_ratio{device}``      gauge   latest busy ratio 0–1
``flopwatch_estimated_flops_total{device}``  counter estimated FLOPs since the ledger began (all busy time)
``flopwatch_workloads_total{device,status}`` counter workloads recorded, by status
``flopwatch_workload_active{device}``        gauge   1 while a workload is open
``flopwatch_sensor_errors_total{device}``    counter failed sensor reads
``flopwatch_info{version,...}``              info    version, profile hash, ledger key fingerprint
=========================================== ======= =====================================================

plus ``flopwatch_net_energy_joules_total{device}``, ``flopwatch_outside_workload_net_energy_joules_total{device}``,
``flopwatch_workload_estimated_flops{device}`` (running estimate of the open workload) and
``flopwatch_ledger_head_seq`` (compare with the ledger to detect truncation),
``flopwatch_idle_power_min_watts{device}`` (lowest settled idle power) and the running window verdict:
``flopwatch_window_verdict{flopwatch_window_verdict=above|below|uncertain|n/a}`` (a state set: 1 for the
current state), ``flopwatch_window_lower_flops``, ``flopwatch_window_upper_flops`` (+Inf: unknown),
``flopwatch_window_seconds``. The verdict comes from a swappable function (see ``monitor/window.py``).

Counters restored from the ledger after a restart continue from the checkpointed totals, so
``increase()`` over a restart stays correct. Only totals are exposed, never traces (privacy).
"""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Info, start_http_server

from flopwatch import __version__
from flopwatch.errors import ConfigError

if TYPE_CHECKING:
    from flopwatch.monitor.window import WindowVerdict


class MonitorMetrics:
    """The daemon's metrics in their own :class:`CollectorRegistry`; serve with :meth:`start`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.energy = Counter(
            "flopwatch_energy_joules", "Energy measured since the ledger began.", ["device"], registry=r
        )
        self.net_energy = Counter(
            "flopwatch_net_energy_joules",
            "Energy above the idle baseline during busy time since the ledger began.",
            ["device"],
            registry=r,
        )
        self.outside_energy = Counter(
            "flopwatch_outside_workload_net_energy_joules",
            "Net energy of busy time outside detected workloads (short bursts below the detection hysteresis).",
            ["device"],
            registry=r,
        )
        self.power = Gauge("flopwatch_power_watts", "Latest power reading.", ["device"], registry=r)
        self.util = Gauge("flopwatch_utilization_ratio", "Latest utilisation (0-1).", ["device"], registry=r)
        self.flops = Counter(
            "flopwatch_estimated_flops", "Estimated FLOPs since the ledger began.", ["device"], registry=r
        )
        self.workload_flops = Gauge(
            "flopwatch_workload_estimated_flops",
            "Running estimate of the open workload.",
            ["device"],
            registry=r,
        )
        self.workloads = Counter(
            "flopwatch_workloads",
            "Workloads recorded in the ledger, by status.",
            ["device", "status"],
            registry=r,
        )
        self.active = Gauge(
            "flopwatch_workload_active", "1 while a workload is open.", ["device"], registry=r
        )
        self.sensor_errors = Counter(
            "flopwatch_sensor_errors", "Failed sensor reads.", ["device"], registry=r
        )
        self.ledger_head = Gauge(
            "flopwatch_ledger_head_seq", "Sequence number of the newest ledger row.", registry=r
        )
        self.min_idle_power = Gauge(
            "flopwatch_idle_power_min_watts",
            "Lowest mean power over a settled idle window (an idle baseline above it hides energy).",
            ["device"],
            registry=r,
        )
        self.window_verdict = Enum(
            "flopwatch_window_verdict",
            "Threshold verdict over all compute of the last window (workloads and busy energy outside them).",
            states=["above", "below", "uncertain", "n/a"],
            registry=r,
        )
        self.window_verdict.state("n/a")
        self.window_lower = Gauge(
            "flopwatch_window_lower_flops", "Lower bound on the FLOPs of the verdict window.", registry=r
        )
        self.window_upper = Gauge(
            "flopwatch_window_upper_flops",
            "Upper bound on the FLOPs of the verdict window (+Inf: unknown).",
            registry=r,
        )
        self.window_seconds = Gauge("flopwatch_window_seconds", "Length of the verdict window.", registry=r)
        self.info = Info("flopwatch", "flopwatch daemon build and configuration.", registry=r)
        self.info.info({"version": __version__})
        self._server: Any = None
        self._thread: Any = None

    def add_device(self, device: str) -> None:
        """Create the device's series at 0 so they exist before the first event."""
        for m in (self.energy, self.net_energy, self.outside_energy, self.flops, self.sensor_errors):
            m.labels(device=device)
        self.active.labels(device=device).set(0)
        self.workload_flops.labels(device=device).set(0)

    def set_info(self, **labels: str) -> None:
        self.info.info({"version": __version__, **{k: str(v) for k, v in labels.items()}})

    def set_window_verdict(self, v: WindowVerdict) -> None:
        self.window_verdict.state(v.verdict)
        self.window_lower.set(v.lower_flops)
        self.window_upper.set(v.upper_flops)
        self.window_seconds.set(v.window_s)

    @staticmethod
    def inc(counter: Counter, amount: float, **labels: str) -> None:
        """Increment a counter by a non-negative amount (counters never go down)."""
        if amount > 0:
            counter.labels(**labels).inc(amount)

    def start(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``addr:port`` (port 0: any free port); returns the bound port."""
        try:
            self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as e:
            # One line and exit 2 (ConfigError), not a traceback and a systemd restart loop.
            why = "is in use" if e.errno == errno.EADDRINUSE else f"cannot be bound ({e.strerror or e})"
            raise ConfigError(f"metrics port {port} on {addr} {why}", field="metrics_port") from None
        return int(self._server.server_port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
