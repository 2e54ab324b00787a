"""Printing strings that came from outside (labels, device names, sensor messages, ledger payloads) literally.

One escaping rule for the whole project: every non-printable character — C0/C1 controls, DEL, the line and
paragraph separators — is written as ``\\xNN``/``\\uNNNN``/``\\UNNNNNNNN``, so an ANSI escape in a device name
cannot move the cursor and a newline cannot fake a log line. Markup is never parsed here: the CLI's console
(``flopwatch.cli._output``) turns rich markup off and passes every string through :func:`literal` with
``keep="\\n\\t"`` (multi-line help text stays readable); the daemon's log lines use the default, which escapes
newlines too (one event, one journal line). This module imports nothing, so the daemon need not load the CLI.
"""

from __future__ import annotations


def _escape(ch: str) -> str:
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def literal(value: object, *, keep: str = "") -> str:
    """``str(value)`` with non-printable characters escaped (``\\x1b`` → the four characters ``\\x1b``).

    ``keep``: characters left as they are even though not printable (the CLI keeps ``"\\n\\t"``).
    """
    s = value if isinstance(value, str) else str(value)
    if s.isprintable():
        return s
    return "".join(ch if ch.isprintable() or ch in keep else _escape(ch) for ch in s)


__all__ = ["literal"]
