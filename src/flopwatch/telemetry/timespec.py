"""Parsing of the fleet command's times (RFC 3339 or Unix seconds), durations and series selectors."""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

from flopwatch.errors import InputError

_DUR = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
#: 9999-12-31T23:59:59Z: a later "time" is a typo or a lie, and would become a query spanning millennia.
MAX_TIME_S = 253402300799.0
#: No step, window or chunk is longer than a century.
MAX_DURATION_S = 100 * 31536000.0
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def parse_time(value: str | float, *, field: str = "start") -> float:
    """Unix seconds from ``1700000000``, ``1700000000.5`` or RFC 3339 (``2026-11-30T12:00:00Z``, with offset)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        t = float(value)
    else:
        s = str(value).strip()
        t = _float(s)
        if t is None:
            d = _iso(s)
            if d is None:
                raise InputError(
                    f"not RFC 3339 or Unix seconds: {value!r} (e.g. 2026-11-30T12:00:00Z or 1764504000)",
                    field=field,
                )
            if d.tzinfo is None:
                raise InputError(f"RFC 3339 time needs a zone (Z or ±hh:mm): {value!r}", field=field)
            try:
                t = d.astimezone(timezone.utc).timestamp()
            except (OverflowError, ValueError, OSError):  # year 1 at +01:00, year 9999 at -01:00
                t = math.inf
    if not (math.isfinite(t) and 0 <= t <= MAX_TIME_S):
        raise InputError(f"must be a time between 1970 and 9999, got {value!r}", field=field)
    return t


def _float(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _iso(s: str) -> datetime | None:
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None


def parse_duration(value: str | float, *, field: str = "step") -> float:
    """Seconds from a Prometheus duration (``15s``, ``5m``, ``1h30m``) or a plain number of seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        d = float(value)
    else:
        s = str(value).strip()
        try:
            d = float(s)
        except ValueError:
            parts = _DUR.findall(s)
            if not parts or "".join(n + u for n, u in parts) != s:
                raise InputError(f"not a duration: {value!r} (e.g. 15s, 5m, 1h)", field=field) from None
            d = sum(float(n) * _UNIT_S[u] for n, u in parts)
    if not (math.isfinite(d) and 0 < d <= MAX_DURATION_S):
        raise InputError(f"must be a positive duration of at most 100 years, got {value!r}", field=field)
    return d


def selector_matchers(selector: str | None) -> str:
    """The matchers inside ``{...}`` of a series selector (``'{namespace="research"}'`` → ``namespace="research"``).

    Only label matchers are accepted (the metric names are flopwatch's to choose); quotes and braces must balance.
    """
    if selector is None:
        return ""
    s = selector.strip()
    if not s:
        return ""
    if not (s.startswith("{") and s.endswith("}")):
        raise InputError(
            f"a selector is label matchers in braces, e.g. '{{namespace=\"research\"}}'; got {selector!r}",
            field="selector",
        )
    inner = s[1:-1].strip().rstrip(",")
    if inner.count('"') % 2 or "{" in inner or "}" in inner:
        raise InputError(f"unbalanced quotes or braces in selector {selector!r}", field="selector")
    if "__name__" in inner:
        raise InputError(
            "the selector may not match __name__ (flopwatch picks the DCGM metrics)", field="selector"
        )
    return inner
