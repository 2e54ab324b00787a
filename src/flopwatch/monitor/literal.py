"""Strings that came from outside (device names, sensor messages, ledger payloads) in the daemon's log lines.

An ANSI escape or a newline in a device name must not move the cursor or fake a log line in the journal:
:func:`literal` escapes every non-printable character (C0/C1 controls including newline, DEL, line and paragraph
separators) as ``\\xNN``/``\\uNNNN``. (The CLI prints through ``flopwatch.cli._output``, which does the same for
the console and never parses markup; this module is for the daemon, which must not import the CLI.)
"""

from __future__ import annotations


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
