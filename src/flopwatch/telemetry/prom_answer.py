"""The checks of a Prometheus HTTP API answer, for :mod:`flopwatch.telemetry.prom_client` (what is checked and
refused: docs/fleet.md, "The Prometheus client"). Anything wrong raises :class:`_Refused`; ``NaN`` values are
left out and counted (Prometheus's spelling of "no sample"). Fleet answers hold thousands of series of a few
points, so every check is a C-level pass (``map``, ``set``, numpy), a Python loop only names what is wrong,
and the garbage collector is paused while an answer is decoded and checked (:func:`gc_paused`; see RESULTS.md).
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain, repeat
from typing import Any, NamedTuple

import numpy as np
import orjson


class Series(NamedTuple):
    """One series of a range-query answer: its labels and its points (seconds, values). A named tuple, not a
    dataclass: a fleet answer holds thousands of series and a frozen dataclass costs ≈ 1 µs more each to build."""

    labels: Mapping[str, str]
    t: np.ndarray
    v: np.ndarray


class Columns(NamedTuple):
    """A range answer column-wise: each series' labels, its number of points (≥ 1) and all points in series
    order. The fleet reader folds these as they are: a pair of array views per series cost more than its fold."""

    labels: list[Mapping[str, str]]
    n: np.ndarray
    t: np.ndarray
    v: np.ndarray

    def series(self) -> list[Series]:
        cuts = list(map(slice, *(lambda b: (b[:-1], b[1:]))(np.cumsum([0, *self.n.tolist()]).tolist())))
        return list(map(Series, self.labels, map(self.t.__getitem__, cuts), map(self.v.__getitem__, cuts)))

    @staticmethod
    def of(series: Sequence[Series]) -> Columns:
        """Series (a test's, a replay's) as columns; empty ones dropped."""
        ss = [s for s in series if len(s.t)]
        cat = lambda xs: np.concatenate(xs) if xs else np.empty(0)  # noqa: E731
        n = np.array([len(s.t) for s in ss], dtype=np.intp)
        return Columns([s.labels for s in ss], n, cat([s.t for s in ss]), cat([s.v for s in ss]))


class _Refused(Exception):
    """The answer broke the API's shape; the message says how (wrapped into a PrometheusError by the caller)."""


def _clean(s: object, n: int = 200) -> str:
    """Server-supplied text on one line, control characters escaped, cut to ``n`` characters."""
    t = repr(str(s))[1:-1]
    return t if len(t) <= n else f"{t[:n]}…"


def _bare_constant(name: str) -> float:
    raise _Refused(f"bare {name} in the JSON (not JSON; Prometheus quotes its values)")


_GC_LOCK = threading.Lock()
_gc_holders = 0
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while an answer is decoded and checked (the client threads share one
    count: the last to leave restores it). Decoding builds ~10 container objects per series, each of which can
    trigger a collection that walks every live object; on the fleet's answers that was ~60 % of the decode's CPU
    (benchmarks/RESULTS.md, "Fleet"). The answer is acyclic and bounded by ``max_answer_bytes``: reference counting
    frees it."""
    global _gc_holders, _gc_was_enabled
    with _GC_LOCK:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                gc.enable()


def _envelope(raw: bytes | bytearray) -> tuple[Any, list[str]]:
    """(data, warnings) of a successful answer."""
    if not raw or raw.isspace():  # as ``not raw.strip()``, without a copy of the answer
        raise _Refused("empty answer")
    try:  # orjson decodes ≈ 2 × faster; what it refuses (NaN, a BOM, lone surrogates, 1e400) json judges as before
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            doc = json.loads(raw, parse_constant=_bare_constant)
    except _Refused:
        raise
    except RecursionError:
        raise _Refused("JSON nested too deep") from None
    except (ValueError, UnicodeDecodeError):
        raise _Refused("answer is not JSON (is this a Prometheus API URL?)") from None
    if not isinstance(doc, dict) or type(doc.get("status")) is not str:
        raise _Refused("answer is not a Prometheus API envelope (no 'status')")
    if doc["status"] != "success":
        raise _Refused(_api_error(raw) or f"status {_clean(doc['status'], 40)!r}")
    if "data" not in doc:
        raise _Refused("answer has no 'data'")
    warn = doc.get("warnings") or []
    if not isinstance(warn, list) or any(type(w) is not str for w in warn):
        raise _Refused("'warnings' is not a list of strings")
    return doc["data"], [_clean(w) for w in warn[:20]]


#: A character no decimal number (nor ``NaN``) contains: found in one C-level pass over all values joined, with no
#: per-sample Python check and no regex backtracking state (a repeated-group regex cost ~500 B per sample).
#: What passes is then parsed by numpy, which refuses the rest ("1e", "--1", "").
_NOT_DECIMAL = re.compile(r"[^0-9.eE+\-Na\x00]")


def _values(raw: list[Any]) -> np.ndarray:
    """Sample values (strings of finite decimals, or ``NaN``) as floats; refuses anything else."""
    if not raw:
        return np.empty(0)
    try:
        joined = "\x00".join(raw)
    except TypeError:
        bad = next(x for x in raw if type(x) is not str)
        raise _Refused(f"sample value {_clean(json.dumps(bad), 40)} is not a string of a number") from None
    m = _NOT_DECIMAL.search(joined)
    if m is not None:
        bad_s = joined[joined.rfind("\x00", 0, m.start()) + 1 :].split("\x00", 1)[0]
        raise _Refused(f"sample value {_clean(bad_s, 40)!r} is not a finite decimal number")
    try:
        v = np.array(raw, dtype=float)
    except ValueError:
        bad_s = next(x for x in raw if not _parses(x))
        raise _Refused(f"sample value {_clean(bad_s, 40)!r} is not a finite decimal number") from None
    over = np.isinf(v)
    if over.any():
        raise _Refused(f"sample value {_clean(raw[int(np.argmax(over))], 40)!r} is out of a float's range")
    return v


def _parses(x: str) -> bool:
    try:
        float(x)
    except ValueError:
        return False
    return True


def _times(ts: list[Any], lo: float, hi: float) -> np.ndarray:
    if set(map(type, ts)) - {int, float}:
        bad = next(x for x in ts if type(x) not in (int, float))
        raise _Refused(f"sample timestamp {_clean(json.dumps(bad), 40)} is not a number")
    try:
        t = np.array(ts, dtype=float)
    except OverflowError:  # an integer past float64
        raise _Refused("a sample timestamp is out of a float's range") from None
    out = ~((t >= lo) & (t <= hi))  # NaN fails both comparisons
    if out.any():
        x = float(t[int(np.argmax(out))])
        raise _Refused(f"sample timestamp {x!r} outside the asked range {lo:.3f}–{hi:.3f}")
    return t


class LabelMemo:
    """The last few label lists that passed :func:`_labels` (one client's): the queries of a fleet chunk answer the
    same series, and a list equal to a checked one passes every check again (a ``str`` equals only a ``str``, a
    ``dict`` only a ``dict``), so one comparison (≈ ⅓ of the checks' cost) stands for them."""

    def __init__(self, size: int = 4) -> None:
        self._size = size
        # replaced whole, never mutated: safe across the reader's threads
        self._lists: tuple[list[Any], ...] = ()

    def known(self, metas: list[Any]) -> list[Any] | None:
        """A new list of the checked maps equal to ``metas``'s (shared maps: the fleet reader's comparison of two
        queries' label lists then meets the same objects), or None."""
        return next((list(m) for m in self._lists if len(m) == len(metas) and m == metas), None)

    def add(self, metas: list[Any]) -> None:
        self._lists = (metas, *self._lists)[: self._size]


def _labels(
    result: Any, key: str, memo: LabelMemo | None = None
) -> tuple[list[Mapping[str, str]], list[Any]]:
    """Each series' label map and its ``key`` entry, checked with C-level ``map`` passes over the whole answer (a
    per-series Python loop cost ≈ 4 µs a series; fleet answers hold thousands); the slow loop runs only to name
    what is wrong."""
    if not isinstance(result, list):
        raise _Refused("'result' is not a list")
    try:
        got = list(map(dict.get, result, repeat(key)))  # TypeError: a series that is not a map
    except TypeError:
        raise _Refused(f"a series without '{key}'") from None
    # `all` tests only truth (a list's is its length); `None in` compared each entry with None (≈ 3 × slower)
    if not all(got) and None in got and not all(map(dict.__contains__, result, repeat(key))):
        raise _Refused(f"a series without '{key}'")
    metas: list[Any] = list(map(dict.get, result, repeat("metric")))
    if memo is not None and (known := memo.known(metas)) is not None:
        return known, got
    if (
        set(map(type, metas)) - {dict}
        or set(map(type, chain.from_iterable(metas))) - {str}
        or set(map(type, chain.from_iterable(map(dict.values, metas)))) - {str}
    ):
        m = next(
            m
            for m in metas
            if type(m) is not dict or any(type(k) is not str or type(x) is not str for k, x in m.items())
        )
        raise _Refused(f"series labels {_clean(json.dumps(m)[:60], 60)} are not a map of strings")
    if _has_duplicate(metas):
        seen: set[frozenset[tuple[str, str]]] = set()
        dup = next(m for m in metas if (k := frozenset(m.items())) in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _Refused(f"label set {_clean(json.dumps(dup)[:120], 120)} appears twice")
    if memo is not None:
        memo.add(metas)
    return metas, got


def _has_duplicate(metas: list[dict[str, str]]) -> bool:
    """Whether a label set appears twice, in any key order. Compared as (names, values) tuple pairs (a third of
    the cost of frozensets of items), which is exact when no two series name the same keys in different orders —
    checked on the few distinct name tuples (Prometheus sorts label names: an honest answer has one order per set)."""
    names = list(map(tuple, metas))
    orders = set(names)
    if len(set(map(frozenset, orders))) == len(orders):
        return len(set(zip(names, map(tuple, map(dict.values, metas)), strict=True))) != len(metas)
    return len(set(map(frozenset, map(dict.items, metas)))) != len(metas)


def _result(d: Any, want: str) -> Any:
    if not isinstance(d, dict):
        raise _Refused("'data' is not an object")
    rt = d.get("resultType")
    if rt != want:
        raise _Refused(f"result type {_clean(json.dumps(rt), 20)} where a {want} was asked")
    if "result" not in d:
        raise _Refused("no 'result'")
    return d["result"]


def _points(pts: list[Any], lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) of [time, value] pairs (checked with C-level ``map``: ~1 M samples per fleet answer). The
    pairs are flattened once and split by slicing (two ``itemgetter`` passes cost twice that)."""
    if set(map(type, pts)) - {list} or set(map(len, pts)) - {2}:
        raise _Refused("a sample is not a [time, value] pair")
    flat = list(chain.from_iterable(pts))
    return _times(flat[0::2], lo, hi), _values(flat[1::2])


def _vector(d: Any, lo: float, hi: float) -> tuple[list[Mapping[str, str]], np.ndarray, np.ndarray, set[int]]:
    """(labels, times, values, indices of NaN values) of a vector answer."""
    result = _result(d, "vector")
    metas, pts = _labels(result, "value")
    t, v = _points(pts, lo, hi)
    return metas, t, v, set(np.flatnonzero(np.isnan(v)).tolist())


def _matrix(d: Any, lo: float, hi: float, memo: LabelMemo | None = None) -> tuple[Columns, int, int]:
    """The columns of a matrix answer (NaN samples left out; empty series dropped), the count of NaN samples and
    the count of series holding any. All points are converted in one numpy call, never per series."""
    result = _result(d, "matrix")
    metas, per = _labels(result, "values", memo)
    if set(map(type, per)) - {list}:
        raise _Refused("a series' 'values' is not a list")
    lens = np.fromiter(map(len, per), dtype=np.intp, count=len(per))
    t, v = _points(list(chain.from_iterable(per)), lo, hi)
    bounds = np.cumsum(lens)
    # within a series, timestamps strictly increase (the TSDB stores one sample per series and time)
    step = np.diff(t) > 0
    if len(step):
        inner = np.ones(len(step), dtype=bool)
        inner[bounds[(bounds > 0) & (bounds < len(t))] - 1] = False
        if (inner & ~step).any():
            raise _Refused("a series' timestamps repeat or go backwards")
    nan = np.isnan(v)
    n_nan = n_series = 0
    if nan.any():
        hit = np.bincount(np.repeat(np.arange(len(lens)), lens)[nan], minlength=len(lens))
        n_nan, n_series = int(hit.sum()), int(np.count_nonzero(hit))
        t, v, lens = t[~nan], v[~nan], lens - hit
    if not lens.all():
        metas = [m for m, k in zip(metas, (lens > 0).tolist(), strict=True) if k]
        lens = lens[lens > 0]
    return Columns(metas, lens, t, v), n_nan, n_series


def _api_error(raw: bytes | bytearray) -> str | None:
    try:
        d = json.loads(raw[:65536], parse_constant=float)
    except (ValueError, RecursionError):
        return None
    if isinstance(d, dict) and d.get("error"):
        return f"{_clean(d.get('errorType', 'error'), 40)}: {_clean(d['error'])}"
    return None
