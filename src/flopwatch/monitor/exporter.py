"""Prometheus exposition of the daemon's live state (prometheus-client, own registry, no globals).

Metric names follow the Prometheus naming guide (base units, ``_total`` for counters, ``_ratio`` for 0–1); the
list with types and labels is docs/monitor.md ("Prometheus"), each metric's help text is below. The running window
verdict behind ``flopwatch_window_verdict`` comes from a swappable function (see ``monitor/window.py``).

The same port serves the ledger's witness endpoints (docs/monitor.md, "Witnessing"): ``GET /head`` — the newest
signed tree head as JSON ``{"size", "root", "time", "signature", "key_id"}`` — and
``GET /consistency?first=N&second=M`` — ``{"first", "second", "proof": [hex, …]}``, the RFC 9162 consistency
proof between two sizes of the history tree.

The per-device series are collected at scrape (:class:`AccountsCollector`, a client_python custom collector like
its ProcessCollector): each scrape reads every account's running totals under the daemon's lock; the accounting
pushes nothing. The totals are restored from the ledger's last checkpoint after a restart, so the counters
continue and ``increase()`` over a restart stays correct. Only totals are exposed, never traces (privacy).
"""

from __future__ import annotations

import errno
import json
import socket
import socketserver
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Enum, Gauge, Info, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from flopwatch import __version__
from flopwatch.errors import ConfigError

if TYPE_CHECKING:
    from flopwatch.monitor.window import WindowVerdict


@dataclass(frozen=True)
class DeviceSample:
    """One device's values at a scrape, read from its account (totals since the ledger began, so the counters
    continue across restarts because the totals do)."""

    device: str
    energy_j: float
    net_energy_j: float
    outside_net_energy_j: float
    estimated_flops: float
    sensor_errors: float
    power_w: float | None = None
    util: float | None = None
    min_idle_power_w: float | None = None
    active: bool = False
    workload_flops: float = 0.0
    workloads: Mapping[str, int] = field(default_factory=dict)  # rows recorded this session, by status


#: (name, help) of the per-device counters, each exported with ``_total``.
_COUNTERS = (
    ("energy_joules", "energy_j", "Energy measured since the ledger began."),
    (
        "net_energy_joules",
        "net_energy_j",
        "Energy above the idle baseline during busy time since the ledger began.",
    ),
    (
        "outside_workload_net_energy_joules",
        "outside_net_energy_j",
        "Net energy of busy time outside detected workloads (short bursts below the detection hysteresis).",
    ),
    ("estimated_flops", "estimated_flops", "Estimated FLOPs since the ledger began."),
    ("sensor_errors", "sensor_errors", "Failed sensor reads."),
)


class AccountsCollector(Collector):
    """The per-device series, computed at scrape from ``sample()`` (:class:`DeviceSample` per device).

    A counter never goes down: each is exported as the highest value seen (the busy net energy dips when a
    busy interval draws below the idle baseline; the outside energy only grows while settled idle).
    """

    def __init__(self, sample: Callable[[], list[DeviceSample]]) -> None:
        self._sample = sample
        self._high: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def describe(self) -> Iterable[Any]:
        return self._families([])  # names only: registering never calls sample()

    def collect(self) -> Iterable[Any]:
        return self._families(self._sample())

    def _families(self, samples: list[DeviceSample]) -> list[Any]:
        out: list[Any] = []
        with self._lock:
            for name, attr, help_ in _COUNTERS:
                f = CounterMetricFamily(f"flopwatch_{name}", help_, labels=["device"])
                for s in samples:
                    key = (name, s.device)
                    v = max(self._high.get(key, 0.0), float(getattr(s, attr)))
                    self._high[key] = v
                    f.add_metric([s.device], v)
                out.append(f)
        gauges = (
            ("power_watts", "Latest power reading.", lambda s: s.power_w),
            ("utilization_ratio", "Latest utilisation (0-1).", lambda s: s.util),
            (
                "workload_estimated_flops",
                "Running estimate of the open workload.",
                lambda s: s.workload_flops,
            ),
            ("workload_active", "1 while a workload is open.", lambda s: 1.0 if s.active else 0.0),
            (
                "idle_power_min_watts",
                "Lowest mean power over a settled idle window (an idle baseline above it hides energy).",
                lambda s: s.min_idle_power_w,
            ),
        )
        for name, help_, get in gauges:
            g = GaugeMetricFamily(f"flopwatch_{name}", help_, labels=["device"])
            for s in samples:
                v = get(s)
                if v is not None:
                    g.add_metric([s.device], float(v))
            out.append(g)
        w = CounterMetricFamily(
            "flopwatch_workloads", "Workloads recorded in the ledger, by status.", labels=["device", "status"]
        )
        for s in samples:
            for status, n in sorted(s.workloads.items()):
                w.add_metric([s.device, status], float(n))
        out.append(w)
        return out


class MonitorMetrics:
    """The daemon's metrics in their own :class:`CollectorRegistry`; serve with :meth:`start`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.ledger_head = Gauge(
            "flopwatch_ledger_head_seq", "Sequence number of the newest ledger row.", registry=r
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
        self._head_fn: Callable[[], dict[str, Any] | None] | None = None
        self._proof_fn: Callable[[int, int], list[str]] | None = None

    def serve_ledger(
        self,
        head: Callable[[], dict[str, Any] | None],
        consistency: Callable[[int, int], list[str]],
    ) -> None:
        """Serve ``GET /head`` (``head()``: the newest signed head, None before the first) and
        ``GET /consistency?first=N&second=M`` (``consistency(N, M)``: hex hashes; ValueError if out of range)."""
        self._head_fn, self._proof_fn = head, consistency

    def collect_accounts(self, sample: Callable[[], list[DeviceSample]]) -> AccountsCollector:
        """Expose the per-device series through ``sample()`` — called at each scrape, under the daemon's lock —
        instead of updates pushed from the accounting (as client_python's ProcessCollector and Kepler do)."""
        c = AccountsCollector(sample)
        self.registry.register(c)
        return c

    def set_info(self, **labels: str) -> None:
        self.info.info({"version": __version__, **{k: str(v) for k, v in labels.items()}})

    def set_window_verdict(self, v: WindowVerdict) -> None:
        self.window_verdict.state(v.verdict)
        self.window_lower.set(v.lower_flops)
        self.window_upper.set(v.upper_flops)
        self.window_seconds.set(v.window_s)

    def start(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``addr:port`` (port 0: any free port); returns the bound port."""
        try:
            self._server, self._thread = _serve(_App(make_wsgi_app(self.registry), self), port, addr)
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


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class _Threading(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


def _serve(app: Any, port: int, addr: str) -> tuple[WSGIServer, threading.Thread]:
    """prometheus_client's ``start_wsgi_server`` with our own app (metrics + the ledger's witness routes)."""

    class Server(_Threading):
        address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET

    httpd = make_server(addr, port, app, Server, handler_class=_Quiet)
    t = threading.Thread(target=httpd.serve_forever, daemon=True, name="flopwatch-exporter")
    t.start()
    return httpd, t


class _App:
    """``/head`` and ``/consistency`` from the ledger; everything else is prometheus_client's metrics app."""

    def __init__(self, metrics_app: Any, owner: MonitorMetrics) -> None:
        self.metrics_app = metrics_app
        self.owner = owner

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in ("/head", "/consistency"):
            return self.metrics_app(environ, start_response)  # type: ignore[no-any-return]
        if self.owner._head_fn is None:
            return _answer(start_response, 503, {"error": "the ledger is not open yet"})
        try:
            if path == "/head":
                doc = self.owner._head_fn()
                if doc is None:
                    return _answer(start_response, 503, {"error": "no signed tree head yet"})
                return _answer(start_response, 200, doc)
            q = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""), max_num_fields=4)
            first, second = (int(q[k][0]) for k in ("first", "second"))
            assert self.owner._proof_fn is not None
            proof = self.owner._proof_fn(first, second)
            return _answer(start_response, 200, {"first": first, "second": second, "proof": proof})
        except (KeyError, ValueError) as e:
            return _answer(
                start_response, 400, {"error": f"need integers first <= second in range: {e}"[:200]}
            )
        except Exception as e:  # noqa: BLE001 - a failed proof must not kill the exporter thread
            return _answer(start_response, 500, {"error": f"{type(e).__name__}: {e}"[:200]})


def _answer(start_response: Callable[..., Any], code: int, doc: Any) -> list[bytes]:
    body = json.dumps(doc, sort_keys=True).encode()
    reason = {200: "OK", 400: "Bad Request", 500: "Internal Server Error", 503: "Service Unavailable"}[code]
    start_response(
        f"{code} {reason}", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]
