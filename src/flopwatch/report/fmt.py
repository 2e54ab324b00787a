"""One number format for the report, the headline and the figures: three significant digits.

``5457`` and ``1.06e+04`` side by side read as different precisions; ``-0.0`` reads as a sign that is not there.
:func:`sig3` prints every quantity with three significant digits, plain between 0.001 and 10⁵ and in
scientific notation outside (FLOP counts), and never prints a negative zero.
"""

from __future__ import annotations

import math
from typing import Any

NONE = "–"


def sig3(x: Any, *, signed: bool = False, none: str = NONE, digits: int = 3) -> str:
    """``x`` with ``digits`` significant digits: ``5460``, ``10600``, ``0.0123``, ``2.85e+15``, ``0``.

    ``signed`` prefixes ``+`` to positive values (errors, differences); a value that rounds to zero prints as
    ``0`` without a sign.
    """
    if x is None:
        return none
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(v):
        return none
    if math.isinf(v):
        return ("+" if signed and v > 0 else "") + ("∞" if v > 0 else "−∞")
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    rounded = round(v, digits - 1 - mag)
    if rounded == 0:
        return "0"
    mag = math.floor(math.log10(abs(rounded)))  # 9.996 → 10.0
    sign = "+" if signed and rounded > 0 else ""
    if -3 <= mag < 5:
        decimals = max(0, digits - 1 - mag)
        return f"{sign}{rounded:.{decimals}f}"
    return f"{sign}{rounded:.{digits - 1}e}"


def within(x: Any, spread: Any, *, signed: bool = False, none: str = NONE) -> str:
    """``x`` rounded to the decimal place of ``spread``'s leading digit (a mean beside its ±spread): a gain of
    −0.0267 pp with a ±0.9 pp spread prints ``0.0``, not ``-0.0267``. Without a usable spread, :func:`sig3`."""
    try:
        sp = abs(float(spread))
        v = float(x)
    except (TypeError, ValueError):
        return sig3(x, signed=signed, none=none)
    if not (math.isfinite(sp) and sp > 0 and math.isfinite(v)):
        return sig3(x, signed=signed, none=none)
    decimals = -math.floor(math.log10(sp))
    r = round(v, decimals)
    if r == 0:
        r = 0.0  # no "-0.0"
    sign = "+" if signed and r > 0 else ""
    return f"{sign}{r:.{max(0, decimals)}f}"


def gain_pp(g: dict[str, Any]) -> tuple[str, str, str]:
    """A paired gain (``mean_pp``, ``p025``, ``p975``) as signed texts rounded to what the 95 % range supports."""
    half = (float(g["p975"]) - float(g["p025"])) / 2.0
    return tuple(within(g[k], half, signed=True) for k in ("mean_pp", "p025", "p975"))  # type: ignore[return-value]


def ratio(x: Any, *, none: str = NONE) -> str:
    """A median ratio (T ÷ truth): :func:`sig3` without trailing zeros (``0.038``, ``2.8``, ``2.83``); a median
    over a few dozen runs has no fourth digit to show."""
    s = sig3(x, none=none)
    return s if s == none else tick(float(s))


def pct(x: Any, *, signed: bool = False, none: str = NONE) -> str:
    """A percentage (already in %) with three significant digits and the unit: ``4.40 %``."""
    s = sig3(x, signed=signed, none=none)
    return s if s == none else f"{s} %"


def share(x: Any, *, none: str = NONE) -> str:
    """A 0–1 share as a percentage: ``0.315`` → ``31.5 %``."""
    if x is None:
        return none
    try:
        return pct(100.0 * float(x), none=none)
    except (TypeError, ValueError):
        return str(x)


def tick(x: float) -> str:
    """A tick label: :func:`sig3` without trailing zeros (``15``, ``2.8``, ``0``; never ``-0.0``)."""
    s = sig3(x)
    if "e" in s:
        mant, exp = s.split("e")
        return (mant.rstrip("0").rstrip(".") if "." in mant else mant) + "e" + exp
    return s.rstrip("0").rstrip(".") if "." in s else s


def tick_formatter() -> Any:
    """A matplotlib tick formatter that prints ticks like :func:`tick` (no ``-0.0``, no mixed notations)."""
    from matplotlib.ticker import Formatter

    class _Tick(Formatter):  # type: ignore[misc]
        def __call__(self, x: float, pos: int | None = None) -> str:
            lo, hi = self.axis.get_view_interval() if self.axis is not None else (0.0, 0.0)
            # 5.6e-17 is zero on an axis spanning ±15: floating-point noise of the tick locator
            return tick(0.0 if abs(x) < 1e-9 * abs(hi - lo) else x)

    return _Tick()
