"""A small Prometheus HTTP API client (``/api/v1/query_range``, ``/query``, ``/label``, ``/status/buildinfo``).

Standard library only (``urllib``): POST forms so long series selectors fit, a timeout per request, retries
with exponential back-off on connection errors, timeouts and 5xx/429 answers, and one-line errors for the
rest. Prometheus answers ``{"status": "error", "errorType": ..., "error": ...}`` on bad queries (HTTP 400/422):
that text is passed on, since it names what is wrong (``exceeded maximum resolution of 11,000 points``).
API reference: https://prometheus.io/docs/prometheus/latest/querying/api/.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flopwatch.errors import InputError

#: Prometheus refuses range queries with more points per series than this (``promql/engine.go``).
MAX_POINTS_PER_SERIES = 11_000


class PrometheusError(InputError):
    """Prometheus could not be reached or refused a request (exit status 2, one line)."""


@dataclass(frozen=True)
class Series:
    """One series of a range-query answer: its labels and its points (seconds, values)."""

    labels: Mapping[str, str]
    t: np.ndarray
    v: np.ndarray


#: An instant query's answer as :meth:`PrometheusClient.query_values` gives it: each series' labels, and their values.
VectorAnswer = tuple[list[Mapping[str, str]], np.ndarray]


def _redact(url: str) -> str:
    p = urllib.parse.urlsplit(url)
    if p.password or p.username:
        netloc = p.hostname or ""
        if p.port:
            netloc += f":{p.port}"
        return urllib.parse.urlunsplit((p.scheme, netloc, p.path, "", ""))
    return urllib.parse.urlunsplit((p.scheme, p.netloc, p.path, "", ""))


class PrometheusClient:
    """Client of one Prometheus (or Prometheus-compatible: Thanos, Mimir, VictoriaMetrics) HTTP API.

    ``opener`` is injectable (a ``urllib.request.OpenerDirector``-like object with ``open(req, timeout=)``) so
    tests and proxies can replace the transport. Constructing the client sends nothing.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 60.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        headers: Mapping[str, str] | None = None,
        opener: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        u = str(url).strip()
        if not u:
            raise InputError("empty Prometheus URL", field="prometheus")
        if "://" not in u:
            u = "http://" + u
        p = urllib.parse.urlsplit(u)
        if p.scheme not in ("http", "https") or not p.netloc:
            raise InputError(f"not an http(s) URL: {url!r}", field="prometheus")
        self.url = u.rstrip("/")
        self.display_url = _redact(self.url)
        if not (math.isfinite(timeout_s) and 0 < timeout_s <= 86400):
            raise InputError(f"must be between 0 and 86400 s, got {timeout_s}", field="timeout")
        if not (0 <= retries <= 100):  # each retry backs off: a huge count is a hang
            raise InputError(f"must be between 0 and 100, got {retries}", field="retries")
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.headers = dict(headers or {})
        self._opener = opener or urllib.request.build_opener()
        self._sleep = sleep
        self.n_requests = 0
        self.bytes_received = 0
        self._version: tuple[int, int] | None = None

    # ------------------------------------------------------------------------------------------ transport
    def _request(self, path: str, params: Sequence[tuple[str, str]], *, get: bool = False) -> Any:
        body = urllib.parse.urlencode(list(params)).encode()
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self._sleep(self.backoff_s * 2 ** (attempt - 1))
            if get:  # the label endpoints take GET only
                req = urllib.request.Request(
                    f"{self.url}{path}?{body.decode()}" if body else f"{self.url}{path}", headers=self.headers
                )
            else:
                req = urllib.request.Request(
                    f"{self.url}{path}",
                    data=body,
                    method="POST",
                    headers={"Content-Type": "application/x-www-form-urlencoded", **self.headers},
                )
            self.n_requests += 1
            try:
                with self._opener.open(req, timeout=self.timeout_s) as r:
                    raw = r.read()
            except urllib.error.HTTPError as e:
                raw = e.read() or b""
                detail = _api_error(raw) or f"HTTP {e.code} {e.reason}"
                if e.code >= 500 or e.code == 429:
                    last = detail
                    continue
                raise PrometheusError(f"{self.display_url}{path}: {detail}", field="prometheus") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                reason = getattr(e, "reason", e)
                last = f"cannot reach Prometheus ({reason})"
                continue
            self.bytes_received += len(raw)
            try:
                doc = json.loads(raw)
            except ValueError:
                raise PrometheusError(
                    f"{self.display_url}{path}: answer is not JSON (is this a Prometheus API URL?)",
                    field="prometheus",
                ) from None
            if not isinstance(doc, dict) or doc.get("status") != "success":
                raise PrometheusError(
                    f"{self.display_url}{path}: {_api_error(raw) or 'unexpected answer'}", field="prometheus"
                )
            return doc.get("data")
        raise PrometheusError(
            f"{self.display_url}: {last} after {self.retries + 1} attempt(s) of {self.timeout_s:g} s",
            field="prometheus",
        )

    # ------------------------------------------------------------------------------------------ API
    def version(self) -> tuple[int, int]:
        """(major, minor) of the server; (2, 0) when it does not say (e.g. a compatible store)."""
        if self._version is None:
            try:
                d = self._request("/api/v1/status/buildinfo", [], get=True)
                parts = str(d.get("version", "2.0")).lstrip("v").split(".")
                self._version = (int(parts[0]), int(parts[1]))
            except (PrometheusError, ValueError, IndexError, AttributeError) as e:
                if isinstance(e, PrometheusError) and "cannot reach" in str(e):
                    raise
                self._version = (2, 0)
        return self._version

    def label_values(self, label: str, match: str | Sequence[str], start: float, end: float) -> list[str]:
        """Values of ``label`` over the series matching ``match`` (several selectors: any of them) in [start, end]."""
        matches = [match] if isinstance(match, str) else list(match)
        d = self._request(
            f"/api/v1/label/{urllib.parse.quote(label)}/values",
            [*(("match[]", m) for m in matches), ("start", _ts(start)), ("end", _ts(end))],
            get=True,
        )
        return sorted(str(x) for x in (d or []))

    def query(self, expr: str, at: float | None = None) -> list[Series]:
        """Instant query: one point per series."""
        params = [("query", expr)]
        if at is not None:
            params.append(("time", _ts(at)))
        d = self._request("/api/v1/query", params)
        if not d or d.get("resultType") != "vector":
            return []
        out = []
        for r in d["result"]:
            t, v = r["value"]
            out.append(Series(r["metric"], np.array([float(t)]), np.array([_num(v)])))
        return out

    def query_values(self, expr: str, at: float | None = None) -> VectorAnswer:
        """Instant query as (each series' labels, their values in one array): no arrays per series, which cost
        ≈ 3 µs each on answers of tens of thousands of series (a fleet's GPU-jobs)."""
        params = [("query", expr)]
        if at is not None:
            params.append(("time", _ts(at)))
        d = self._request("/api/v1/query", params)
        if not d or d.get("resultType") != "vector":
            return [], np.empty(0)
        result = d["result"]
        raw = [r["value"][1] for r in result]
        try:  # numpy parses "1.5", "NaN", "+Inf" itself
            v = np.array(raw, dtype=float)
        except ValueError:
            v = np.array([_num(x) for x in raw], dtype=float)
        return [r["metric"] for r in result], v

    def query_matrix(self, expr: str, at: float) -> list[Series]:
        """Instant query of a range selector (``x[5m]``): the raw samples of each series in the range."""
        d = self._request("/api/v1/query", [("query", expr), ("time", _ts(at))])
        if not d or d.get("resultType") != "matrix":
            return []
        return _parse_matrix(d.get("result", []))

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[Series]:
        """Range query; raises :class:`PrometheusError` when it would exceed the server's point limit."""
        n = int((end - start) // step_s) + 1
        if n > MAX_POINTS_PER_SERIES:
            raise PrometheusError(
                f"{n} points per series exceed Prometheus's limit of {MAX_POINTS_PER_SERIES}: chunk the range",
                field="step",
            )
        d = self._request(
            "/api/v1/query_range",
            [("query", expr), ("start", _ts(start)), ("end", _ts(end)), ("step", f"{step_s:g}")],
        )
        if not d:
            return []
        return _parse_matrix(d.get("result", []))


def _parse_matrix(result: list[Any]) -> list[Series]:
    """Series of a matrix answer. All points are converted in one numpy call and each series gets views into
    those arrays: per-series conversions dominated the reader's CPU time on large fleets (benchmarks/bench_fleet.py).
    """
    metas: list[Mapping[str, str]] = []
    lens: list[int] = []
    points: list[Any] = []
    for r in result:
        vals = r.get("values") or []
        if not vals:
            continue
        metas.append(r.get("metric", {}))
        lens.append(len(vals))
        points.extend(vals)
    if not points:
        return []
    t = np.fromiter((p[0] for p in points), dtype=float, count=len(points))
    raw = [p[1] for p in points]
    try:  # numpy parses "1.5", "NaN", "+Inf" itself
        v = np.array(raw, dtype=float)
    except ValueError:
        v = np.array([_num(x) for x in raw], dtype=float)
    out = []
    a = 0
    for meta, n in zip(metas, lens, strict=True):
        out.append(Series(meta, t[a : a + n], v[a : a + n]))
        a += n
    return out


def _ts(t: float) -> str:
    return f"{float(t):.3f}"


def _num(v: Any) -> float:
    try:
        return float(v)  # Prometheus sends "NaN", "+Inf" as strings too
    except (TypeError, ValueError):
        return float("nan")


def _api_error(raw: bytes) -> str | None:
    try:
        d = json.loads(raw)
    except ValueError:
        return None
    if isinstance(d, dict) and d.get("error"):
        return f"{d.get('errorType', 'error')}: {d['error']}"
    return None
