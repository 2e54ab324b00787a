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
``flopwatch_ledger_head_seq`` (compare with the ledger to detect truncation).

Counters restored from the ledger after a restart continue from the checkpointed totals, so
``increase()`` over a restart stays correct. Only totals are exposed, never traces (privacy).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Info, start_http_server

from flopwatch import __version__


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

    @staticmethod
    def inc(counter: Counter, amount: float, **labels: str) -> None:
        """Increment a counter by a non-negative amount (counters never go down)."""
        if amount > 0:
            counter.labels(**labels).inc(amount)

    def start(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``addr:port`` (port 0: any free port); returns the bound port."""
        self._server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        return int(self._server.server_port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
