"""A Prometheus HTTP API client (``/api/v1/query_range``, ``/query``, ``/label``, ``/status/buildinfo``) that
refuses hostile answers (standard library ``http.client`` and numpy).

Every answer is read under a deadline per query (connect, retries, headers and body: each socket read waits at
most the time left), an optional deadline per run and a size cap, then checked strictly against the API's
shape; anything else raises :class:`PrometheusError`, one line naming the query and what was wrong (exit
status 2). What is refused, what only degrades an answer (``"NaN"`` samples, server warnings), and when it
retries: docs/fleet.md, "The Prometheus client".
"""

from __future__ import annotations

import base64
import functools
import http.client
import io
import math
import re
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from flopwatch.errors import InputError
from flopwatch.telemetry.prom_answer import (
    Columns,
    LabelMemo,
    Series,
    _api_error,
    _clean,
    _envelope,
    _matrix,
    _Refused,
    _vector,
    gc_paused,
)

__all__ = ["Columns", "PrometheusClient", "PrometheusError", "Series", "SeriesList"]

#: Prometheus refuses range queries with more points per series than this (``promql/engine.go``).
MAX_POINTS_PER_SERIES = 11_000
#: Default cap on one answer's body. The fleet reader's answers are ≤ a few MB (32 GPUs per chunk; fleet-wide
#: vectors of 10,000 series ≈ 4 MB); parsing a JSON body costs up to ~10 × its size in Python objects, so this keeps
#: the worst case near 350 MB whatever the server sends.
MAX_ANSWER_BYTES = 32 * 2**20
#: Header bytes allowed on top of the body cap (http.client itself refuses > 100 headers or a line > 64 KiB).
_HEADER_BYTES = 256 * 2**10
_READ_PIECE = 256 * 2**10
#: A query shown in a message is cut to this many characters (fleet selectors list hundreds of UUIDs).
_SHOW_QUERY = 160
_SELECTOR = re.compile(r"(\{[^{}]*\})")
_quote = functools.lru_cache(maxsize=64)(functools.partial(urllib.parse.quote_plus, safe=""))


class PrometheusError(InputError):
    """Prometheus could not be reached, refused a request or gave an answer flopwatch refuses (exit status 2)."""

    #: The HTTP status of a refusal by the server (4xx), else None (unreachable, too slow, malformed…).
    http_status: int | None = None


class SeriesList(list[Series]):
    """The series of one answer, and what was wrong with it but left the rest usable (``degradations``: one
    sentence each, naming the query — for the caller to put in a group's notes)."""

    def __init__(self, series: Iterable[Series] = (), degradations: Iterable[str] = ()) -> None:
        super().__init__(series)
        self.degradations: list[str] = list(degradations)


class _Overdue(Exception):
    """The query's (or the run's) deadline passed while waiting for the server."""


class _TooLarge(Exception):
    """The answer passed its byte budget."""


def _fail(where: str, what: str) -> PrometheusError:
    """The one-line refusal of the request ``where`` (its URL and query)."""
    return PrometheusError(f"{where}: {what}", field="prometheus")


def _show(expr: str) -> str:
    return repr(expr if len(expr) <= _SHOW_QUERY else f"{expr[:_SHOW_QUERY]}…({len(expr)} characters)")


def _redact(url: str) -> str:
    p = urllib.parse.urlsplit(url)
    netloc = p.hostname or ""
    if ":" in netloc:
        netloc = f"[{netloc}]"
    if p.port:
        netloc += f":{p.port}"
    return urllib.parse.urlunsplit((p.scheme, netloc, p.path, "", ""))


def _parse_url(url: object) -> urllib.parse.SplitResult:
    """The split base URL, or an InputError naming what is wrong with it."""
    u = str(url).strip()
    if not u:
        raise InputError("empty Prometheus URL", field="prometheus")
    if any(ord(c) < 33 or ord(c) == 127 for c in u):
        raise InputError(f"URL contains spaces or control characters: {_clean(u, 80)!r}", field="prometheus")
    if "://" not in u:
        u = "http://" + u
    try:
        p = urllib.parse.urlsplit(u)
        port = p.port  # raises ValueError on a port that is not a number in 0–65535
        host = p.hostname
    except ValueError as e:
        raise InputError(f"malformed URL {_clean(url, 80)!r} ({_clean(e, 80)})", field="prometheus") from None
    if p.scheme not in ("http", "https") or not host:
        raise InputError(f"not an http(s) URL: {_clean(url, 80)!r}", field="prometheus")
    if port == 0:
        raise InputError(f"port 0 in URL {_clean(url, 80)!r}", field="prometheus")
    if p.query or p.fragment:
        raise InputError(f"a Prometheus base URL takes no query or fragment: {_clean(url, 80)!r}", field="prometheus")  # fmt: skip
    return p


class _Guard:
    """One query's deadline (monotonic seconds) and byte budget, checked on every socket read."""

    def __init__(self, deadline: float, budget: int, clock: Callable[[], float]) -> None:
        self.deadline = deadline
        self.budget = budget
        self.received = 0
        self.clock = clock

    def left(self) -> float:
        x = self.deadline - self.clock()
        if x <= 0:
            raise _Overdue
        return x

    def count(self, n: int) -> None:
        self.received += n
        if self.received > self.budget:
            raise _TooLarge


class _GuardedIO(io.RawIOBase):
    """The socket as http.client reads it: each read waits at most the time left and counts against the budget.

    ``keep`` is the socket file http.client opened: holding it open keeps the socket alive after the connection
    object lets go of it (``Connection: close``), as http.client's own reader would."""

    def __init__(self, sock: socket.socket, guard: _Guard, keep: Any) -> None:
        super().__init__()
        self._sock = sock
        self._guard = guard
        self._keep = keep

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        self._sock.settimeout(self._guard.left())
        try:
            n = self._sock.recv_into(b)
        except TimeoutError:
            raise _Overdue from None
        self._guard.count(n)
        return n

    def close(self) -> None:
        if not self.closed:
            self._keep.close()
        super().close()


class _GuardedResponse(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, guard: _Guard, **kw: Any) -> None:
        super().__init__(sock, **kw)
        self.fp = io.BufferedReader(_GuardedIO(sock, guard, self.fp), 64 * 1024)


class PrometheusClient:
    """Client of one Prometheus (or Prometheus-compatible: Thanos, Mimir, VictoriaMetrics) HTTP API.

    Thread-safe (one connection per request; the fleet reader queries from a pool). ``opener`` replaces the
    transport (a ``urllib.request.OpenerDirector``-like object with ``open(req, timeout=)``; tests and proxies):
    the body is still read with the size cap and checked strictly, but the deadline then bounds only what the
    opener honours. Constructing the client sends nothing.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 60.0,
        run_timeout_s: float | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        retries: int = 3,
        backoff_s: float = 0.5,
        headers: Mapping[str, str] | None = None,
        opener: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        p = _parse_url(url)
        self._scheme, self._host, self._port = p.scheme, p.hostname or "", p.port
        self._path = p.path.rstrip("/")
        self.url = urllib.parse.urlunsplit((p.scheme, p.netloc, self._path, "", ""))
        self.display_url = _redact(self.url)
        if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and 0 < timeout_s <= 86400):
            raise InputError(f"must be between 0 and 86400 s, got {timeout_s}", field="timeout")
        if run_timeout_s is not None and not (
            math.isfinite(run_timeout_s) and 0 < run_timeout_s <= 30 * 86400
        ):
            raise InputError(f"must be between 0 and 30 days in s, got {run_timeout_s}", field="run-timeout")
        if not (isinstance(max_answer_bytes, int) and 1024 <= max_answer_bytes <= 2**40):
            raise InputError(f"must be between 1 KiB and 1 TiB, got {max_answer_bytes}", field="max-answer-bytes")  # fmt: skip
        # each retry backs off: a huge count is a hang
        if not (isinstance(retries, int) and 0 <= retries <= 100):
            raise InputError(f"must be between 0 and 100, got {retries}", field="retries")
        self.timeout_s = float(timeout_s)
        self.run_timeout_s = None if run_timeout_s is None else float(run_timeout_s)
        self.max_answer_bytes = max_answer_bytes
        self.retries = retries
        self.backoff_s = float(backoff_s)
        self.headers = {"Accept": "application/json", "User-Agent": "flopwatch", **(headers or {})}
        if p.username is not None:  # user:password@host → basic auth (never shown: display_url drops it)
            cred = f"{urllib.parse.unquote(p.username)}:{urllib.parse.unquote(p.password or '')}"
            self.headers.setdefault("Authorization", "Basic " + base64.b64encode(cred.encode()).decode())
        self._opener = opener
        self._sleep = sleep
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._run_deadline: float | None = None
        self.n_requests = 0
        self.bytes_received = 0
        #: Every answer's degradations over this client's life (the run), in arrival order.
        self.degradations: list[str] = []
        self._version: tuple[int, int] | None = None
        self._ssl: ssl.SSLContext | None = None
        self._labels_seen = LabelMemo()  # the fleet's chunk queries answer the same series (prom_answer)

    # ------------------------------------------------------------------------------------------ transport
    def _deadline(self) -> tuple[float, str]:
        """This query's deadline and how to name it when it passes."""
        now = self._clock()
        with self._lock:
            if self.run_timeout_s is not None and self._run_deadline is None:
                self._run_deadline = now + self.run_timeout_s
            run = self._run_deadline
        q = now + self.timeout_s
        if run is not None and run < q:
            return run, f"the run's deadline of {self.run_timeout_s:g} s"
        return q, f"the {self.timeout_s:g} s deadline per query"

    def _exchange(
        self, method: str, target: str, body: bytes | None, headers: Mapping[str, str], guard: _Guard
    ) -> tuple[int, str, bytes | bytearray]:
        """One HTTP exchange under ``guard``: (status, reason, body)."""
        if self._opener is not None:
            return self._exchange_opener(method, target, body, headers, guard)
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        kw: dict[str, Any] = {"context": self._tls()} if self._scheme == "https" else {}
        conn = cls(self._host, self._port, timeout=guard.left(), **kw)
        conn.response_class = lambda sock, **k: _GuardedResponse(sock, guard, **k)  # type: ignore[assignment,misc]
        try:
            conn.request(method, target, body=body, headers=dict(headers))
            r = conn.getresponse()
            if r.length is not None and r.length > self.max_answer_bytes:
                raise _TooLarge
            want = r.length
            raw = self._read_body(r.read)
            if want is not None and len(raw) < want:  # http.client leaves a short Content-Length body to us
                raise http.client.IncompleteRead(raw, want - len(raw))
            return r.status, r.reason, raw
        except TimeoutError:
            if guard.deadline - guard.clock() <= 0.0:
                raise _Overdue from None
            raise
        finally:
            conn.close()

    def _tls(self) -> ssl.SSLContext:
        with self._lock:  # built once: loading the CA store costs milliseconds per request
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            return self._ssl

    def _exchange_opener(
        self, method: str, target: str, body: bytes | None, headers: Mapping[str, str], guard: _Guard
    ) -> tuple[int, str, bytes | bytearray]:
        import urllib.error
        import urllib.request

        host = f"[{self._host}]" if ":" in self._host else self._host
        url = f"{self._scheme}://{host}{'' if self._port is None else f':{self._port}'}{target}"
        req = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
        try:
            with self._opener.open(req, timeout=guard.left()) as r:
                return int(getattr(r, "status", 200) or 200), "OK", self._read_body(r.read)
        except urllib.error.HTTPError as e:
            return e.code, str(e.reason), self._read_body(e.read)
        except urllib.error.URLError as e:
            raise ConnectionError(str(getattr(e, "reason", e))) from None

    def _read_body(self, read: Callable[[int], bytes]) -> bytearray:
        """The body, up to the size cap (a bytearray: ``json.loads`` reads it without a copy of the answer)."""
        buf = bytearray()
        while True:
            piece = read(min(_READ_PIECE, self.max_answer_bytes + 1 - len(buf)))
            if not piece:
                return buf
            buf += piece
            if len(buf) > self.max_answer_bytes:
                raise _TooLarge

    def _request(
        self,
        path: str,
        params: Sequence[tuple[str, str]],
        what: str,
        *,
        get: bool = False,
        then: Callable[[Any, list[str]], Any] | None = None,
    ) -> Any:
        """The ``data`` of a successful answer, after the deadline, size and envelope checks.

        ``what`` names the request in messages (the query, shortened). Returns (data, warnings), or what ``then``
        makes of them: it runs while the garbage collector is still paused, so the decoded document is freed
        before the collector sees it (checking it afterwards cost one young-generation pass over the whole
        document per answer)."""
        where = f"{self.display_url}{path} {what}"
        deadline, deadline_name = self._deadline()
        try:  # a lone surrogate is not text (JSON can spell one in a label value, argv an undecodable byte): round 8
            # ``urlencode``, the selectors quoted once: a fleet chunk's queries share a list of hundreds of UUIDs
            form = "&".join(f"{_quote(k)}={''.join(map(_quote, _SELECTOR.split(v)))}" for k, v in params)
        except UnicodeEncodeError as e:
            raise _fail(where, f"the query holds {e.object[e.start : e.end]!r}: not text") from None
        if get:  # the label endpoints take GET only
            target, body, headers = (
                (f"{self._path}{path}?{form}" if form else f"{self._path}{path}"),
                None,
                self.headers,
            )
        else:
            target, body = f"{self._path}{path}", form.encode()
            headers = {"Content-Type": "application/x-www-form-urlencoded", **self.headers}
        last = ""
        tried = 0
        for attempt in range(self.retries + 1):
            if attempt:
                wait = self.backoff_s * 2 ** (attempt - 1)
                if self._clock() + wait >= deadline:
                    break
                self._sleep(wait)
            guard = _Guard(deadline, self.max_answer_bytes + _HEADER_BYTES, self._clock)
            tried += 1
            with self._lock:
                self.n_requests += 1
            try:
                status, reason, raw = self._exchange("GET" if get else "POST", target, body, headers, guard)
            except _Overdue:
                late = f"no complete answer within {deadline_name}" + (f" ({last})" if last else "")
                raise _fail(where, f"{late} ({guard.received} bytes received)") from None
            except _TooLarge:
                raise _fail(where, f"answer larger than the {self.max_answer_bytes} byte cap") from None
            except ssl.SSLError as e:
                raise _fail(where, f"TLS failed ({_clean(e, 120)})") from None
            except OSError as e:  # refused, reset, closed before answering, no route, no such host: try again
                last = f"cannot reach Prometheus ({_clean(getattr(e, 'strerror', None) or e, 120)})"
                continue
            except http.client.IncompleteRead as e:
                raise _fail(where, f"truncated or badly chunked body ({len(e.partial)} bytes read)") from None
            except (http.client.HTTPException, ValueError) as e:
                # a bad status line (HTTP/0.9, garbage), too many or too long headers, a bad chunk size
                kind = type(e).__name__
                raise _fail(where, f"malformed HTTP answer ({kind}: {_clean(e, 120) or 'empty'})") from None
            with self._lock:
                self.bytes_received += len(raw)
            if status >= 500 or status == 429:
                last = _api_error(raw) or f"HTTP {status} {_clean(reason, 60)}"
                continue
            if status != 200:
                detail = _api_error(raw) or f"HTTP {status} {_clean(reason, 60)}"
                if 300 <= status < 400:
                    detail += " (redirects are not followed: give the final URL)"
                err = _fail(where, detail)
                err.http_status = status
                raise err
            try:
                with gc_paused():
                    d, warn = _envelope(raw)
                    out = (d, warn) if then is None else then(d, warn)
                    del d  # freed before the collector resumes
                    return out
            except _Refused as e:
                raise _fail(where, str(e)) from None
        raise _fail(where, f"{last or 'no answer'} after {tried} attempt(s) within {deadline_name}")

    def _degrade(self, found: list[str]) -> list[str]:
        if found:
            with self._lock:
                self.degradations.extend(found)
        return found

    def _checked(self, where: str, fn: Callable[[], Any]) -> Any:
        try:
            with gc_paused():
                return fn()
        except _Refused as e:
            raise _fail(where, str(e)) from None

    # ------------------------------------------------------------------------------------------ API
    def version(self) -> tuple[int, int]:
        """(major, minor) of the server; (2, 0) when it does not say (e.g. a compatible store)."""
        if self._version is None:
            try:
                d, _w = self._request("/api/v1/status/buildinfo", [], "(build information)", get=True)
                parts = str(d.get("version", "2.0")).lstrip("v").split(".")
                self._version = (int(parts[0]), int(parts[1]))
            except (PrometheusError, ValueError, IndexError, AttributeError) as e:
                if isinstance(e, PrometheusError) and e.http_status is None:
                    raise  # unreachable, slow, oversized or malformed: not "a server without buildinfo"
                self._version = (2, 0)
        return self._version

    def label_values(self, label: str, match: str | Sequence[str], start: float, end: float) -> list[str]:
        """Values of ``label`` over the series matching ``match`` (several selectors: any of them) in [start, end]."""
        matches = [match] if isinstance(match, str) else list(match)
        path = f"/api/v1/label/{urllib.parse.quote(label, safe='')}/values"
        what = f"(values of {label!r} for {_show(' or '.join(matches))})"
        d, warn = self._request(
            path,
            [*(("match[]", m) for m in matches), ("start", _ts(start)), ("end", _ts(end))],
            what,
            get=True,
        )
        where = f"{self.display_url}{path} {what}"
        if not isinstance(d, list) or any(type(x) is not str for x in d):
            raise _fail(where, "label values are not a list of strings")
        if len(set(d)) != len(d):
            raise _fail(where, "a label value is listed twice")
        self._degrade([f"{what}: server warning: {w}" for w in warn])
        return sorted(d)

    def query(self, expr: str, at: float | None = None) -> SeriesList:
        """Instant query: one point per series (series whose value is ``NaN`` left out, named in degradations)."""
        params = [("query", expr)]
        if at is not None:
            params.append(("time", _ts(at)))
            lo, hi = at - 1.0, at + 1.0  # the answer is stamped with the evaluation time
        else:
            lo, hi = 0.0, self._wall() + 86400.0
        d, warn = self._request("/api/v1/query", params, _show(expr))
        where = f"{self.display_url}/api/v1/query {_show(expr)}"
        metas, t, v, bad = self._checked(where, lambda: _vector(d, lo, hi))
        notes = [f"{where}: server warning: {w}" for w in warn]
        if bad:
            notes.append(
                f"{where}: {len(bad)} of {len(metas)} series had the value NaN (no sample): left out"
            )
        out = [Series(m, t[i : i + 1], v[i : i + 1]) for i, m in enumerate(metas) if i not in bad]
        return SeriesList(out, self._degrade(notes))

    def query_matrix(self, expr: str, at: float) -> SeriesList:
        """Instant query of a range selector (``x[5m]``): the raw samples of each series in the range."""
        rng = _range_of(expr)
        lo = at - rng - 1.0 if rng is not None else 0.0
        cols, notes = self._columns("/api/v1/query", [("query", expr), ("time", _ts(at))], expr, lo, at + 1.0)
        return SeriesList(cols.series(), notes)

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> SeriesList:
        """Range query; raises :class:`PrometheusError` when it would exceed the server's point limit."""
        cols, notes = self._range(expr, start, end, step_s)
        return SeriesList(cols.series(), notes)

    def query_columns(self, expr: str, start: float, end: float, step_s: float) -> Columns:
        """:meth:`query_range` as one :class:`Columns` (degradations in :attr:`degradations`)."""
        return self._range(expr, start, end, step_s)[0]

    def _range(self, expr: str, start: float, end: float, step_s: float) -> tuple[Columns, list[str]]:
        n = int((end - start) // step_s) + 1
        if n > MAX_POINTS_PER_SERIES:
            raise PrometheusError(f"{n} points per series exceed Prometheus's limit of {MAX_POINTS_PER_SERIES}: chunk the range", field="step")  # fmt: skip
        params = [("query", expr), ("start", _ts(start)), ("end", _ts(end)), ("step", f"{step_s:g}")]
        return self._columns("/api/v1/query_range", params, expr, start - step_s, end + step_s)

    def _columns(
        self, path: str, params: list[tuple[str, str]], expr: str, lo: float, hi: float
    ) -> tuple[Columns, list[str]]:
        """A matrix answer as columns, with its degradations (checked while the collector is paused)."""
        where = f"{self.display_url}{path} {_show(expr)}"
        return self._request(path, params, _show(expr), then=lambda d, w: self._matrix(where, d, w, lo, hi))

    def _matrix(self, where: str, d: Any, warn: list[str], lo: float, hi: float) -> tuple[Columns, list[str]]:
        cols, n_nan, n_series = self._checked(where, lambda: _matrix(d, lo, hi, self._labels_seen))
        notes = [f"{where}: server warning: {w}" for w in warn]
        if n_nan:
            notes.append(
                f"{where}: {n_nan} sample(s) with the value NaN (no sample) in {n_series} series: left out"
            )
        return cols, self._degrade(notes)


_RANGE = re.compile(r"\[([0-9a-z.]+)\]\s*\)*\s*$")


def _range_of(expr: str) -> float | None:
    """Seconds of a trailing range selector (``x{…}[30m]``, ``[1800000ms]``), or None."""
    from flopwatch.telemetry.timespec import parse_duration

    m = _RANGE.search(expr)
    if m is None:
        return None
    try:
        return parse_duration(m.group(1))
    except InputError:
        return None


def _ts(t: float) -> str:
    return f"{float(t):.3f}"
