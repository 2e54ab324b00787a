"""Printing strings that came from outside (labels, device names, ledger payloads) exactly as they are.

A device name like ``[/bold]`` must not be read as console markup (rich raises on unbalanced tags, so one such
row would make ``ledger show`` fail on that ledger forever), and an ANSI escape in a label must not move the
cursor or fake a line. :func:`literal` escapes every non-printable character (C0/C1 controls, DEL, line and
paragraph separators) as ``\\xNN``/``\\uNNNN``; :func:`text` wraps the result in a ``rich.text.Text``, which
rich prints verbatim, never parsing markup.
"""

from __future__ import annotations

from typing import Any


def literal(value: object) -> str:
    """``str(value)`` with non-printable characters escaped (``\\x1b`` → the four characters ``\\x1b``)."""
    s = value if isinstance(value, str) else str(value)
    if s.isprintable():
        return s
    out = []
    for ch in s:
        if ch.isprintable():
            out.append(ch)
        else:
            o = ord(ch)
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
    return "".join(out)


def text(value: object, style: str = "") -> Any:
    """A rich ``Text`` of :func:`literal` (value) — printed as is, no markup parsing."""
    from rich.text import Text

    return Text(literal(value), style=style)
