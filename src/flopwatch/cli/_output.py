"""Output helpers shared by every CLI module: the console, JSON on stdout, and number formats.

One console factory: markup and highlighting are off, so text the user controls (labels, file names, device
names, sensor messages) prints literally — ``pip install 'flopwatch[nvidia]'`` keeps its brackets — and
control characters in it are shown escaped (``\\x1b``) instead of driving the terminal (the escaping is
:func:`flopwatch.text.literal`, shared with the daemon's log lines). Colour is applied
with ``style=`` or :func:`styled`, never with markup.

One JSON writer: NaN and ±inf become ``null`` and numpy scalars plain numbers, so stdout is strict JSON.

rich is imported inside the functions: ``flopwatch --help`` must stay light.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import os
import sys
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

if TYPE_CHECKING:
    from click import Context

from flopwatch.io import jsonable
from flopwatch.text import literal as _literal

# Exit statuses of every command (also in README "Exit status" and docs/architecture.md).
EXIT_OK = 0
EXIT_FAILED = 1  # the command ran and found a failure: a ledger check failed, a sensor broke mid-run
EXIT_USAGE = 2  # bad option, file, record or field; a sensor that is not available here
EXIT_INTERRUPTED = 130  # Ctrl-C

_NON_TTY_WIDTH = 160  # pipes and CI logs: wide enough that tables of labels and FLOP counts do not truncate


class Group(TyperGroup):
    """typer's group, with a help flag that defaults to False instead of None.

    typer (0.29) coerces every parameter value through a pydantic ``TypeAdapter`` built on first use, except a
    bool flag whose value is already a bool. A group's ``--help`` flag has no default, so running any subcommand
    (``flopwatch estimate --help`` included) coerced the *parent's* unset help value (None) and imported pydantic
    for it: ~0.2 s of every start-up. With the default False, the unset flag is a bool and needs no adapter;
    ``--help`` behaves as before (the callback acts only on True).
    """

    def get_help_option(self, ctx: Context) -> Any:
        opt = super().get_help_option(ctx)
        if opt is not None and opt.default is None:
            opt.default = False
        return opt

    def resolve_command(self, ctx: Context, args: list[str]) -> Any:
        """An unknown command suggests only close names (``estimat`` → 'estimate'; the default cutoff also
        offered 'sim')."""
        name = args[0] if args else ""
        if (
            name
            and not name.startswith("-")
            and not ctx.resilient_parsing
            and self.get_command(ctx, name) is None
        ):
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.75)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            ctx.fail(f"No such command {name!r}.{hint}")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: Context) -> Any:
        """Say "interrupted" where Ctrl-C really arrives: typer 0.29 turns a KeyboardInterrupt escaping the
        command into ``Exit(130)`` (typer/core.py ``_main``), so a handler around ``app()`` never sees it.
        The innermost group prints the line; the outer ones pass the Exit through."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            print("flopwatch: interrupted", file=sys.stderr, flush=True)
            raise typer.Exit(EXIT_INTERRUPTED) from None


class Command(TyperCommand):
    """typer's command, with the usage line in the usual Unix style: ``flopwatch estimate [OPTIONS] RECORDS``
    (typer 0.29 writes required arguments as ``{records}``, which reads like a set literal)."""

    def collect_usage_pieces(self, ctx: Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for p in self.get_params(ctx):
            if p.param_type_name == "argument":
                name = p.metavar or (p.name or "").upper() + ("..." if p.nargs != 1 else "")
                pieces.append(name if p.required else f"[{name}]")
        return pieces


class Argument(TyperArgument):
    """typer's argument; one that declares a metavar (``LEDGER...``) shows it alone, without the type typer
    0.29 appends (``<list[Path]>`` for a list of paths)."""

    def display_type_rich(self, ctx: Context) -> str | None:
        return None if self.metavar is not None else super().display_type_rich(ctx)


def plain_metavars(cmd: Any) -> Any:
    """The click tree ``cmd`` (built by typer) with every command printing the usage line of :class:`Command`.
    (A repeatable option declares ``metavar="<spec>"`` itself, or typer shows ``<list[str]>``.)"""
    for sub in getattr(cmd, "commands", {}).values():
        plain_metavars(sub)
    if type(cmd) is TyperCommand:
        cmd.__class__ = Command  # a subclass without state of its own: only the usage line differs
    for p in getattr(cmd, "params", ()):
        if type(p) is TyperArgument:
            p.__class__ = Argument  # likewise: only the help line differs
    return cmd


def new_app(help: str, **kw: Any) -> typer.Typer:  # noqa: A002 - typer's own parameter name
    """A typer (sub-)app in the project's one style: help text printed literally, no completion options."""
    return typer.Typer(
        help=help, no_args_is_help=True, rich_markup_mode=None, add_completion=False, cls=Group, **kw
    )


def literal(text: object) -> str:
    """``text`` with control characters escaped (newline and tab kept): safe to print to a terminal."""
    return _literal(text, keep="\n\t")


@functools.cache
def _console_class() -> type:
    from rich.console import Console

    class LiteralConsole(Console):
        def render_str(self, text: str, **kwargs: Any) -> Any:  # every str renderable passes here
            return super().render_str(literal(text), **kwargs)

    return LiteralConsole


class RstripLines:
    """A text stream that drops the spaces at the end of each line before passing text on to ``stream``.

    rich pads every rendered line to the table's or console's width, and has no option to stop it: in a terminal
    the padding is invisible, in a pipe or a file it is noise (``grep ' $'``, diffs). Spaces at the end of a
    write that does not end its line are held back until we know whether the line goes on.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._pending = ""  # spaces written at the end of an unfinished line

    def write(self, text: str) -> int:
        lines = (self._pending + text).split("\n")
        last = lines.pop()
        body = last.rstrip(" ")
        self._pending = last[len(body) :]
        out = "".join(line.rstrip(" ") + "\n" for line in lines) + body
        if out:
            self._stream.write(out)
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, errors...: the stream's own
        return getattr(self._stream, name)


def console(*, stderr: bool = False, width: int | None = None) -> Any:
    """The rich console every command prints through (markup off, control characters escaped; piped, no
    trailing spaces)."""
    stream = sys.stderr if stderr else sys.stdout
    file = None
    if not stream.isatty():
        file = RstripLines(stream)
        if width is None and not os.environ.get("COLUMNS", "").strip().isdigit():
            width = _NON_TTY_WIDTH  # piped: wide, unless COLUMNS asks for a width (rich reads it)
    return _console_class()(stderr=stderr, file=file, markup=False, highlight=False, emoji=False, width=width)


def styled(text: object, style: str) -> Any:
    """A rich Text of ``text`` (escaped, literal) in ``style``: for table cells and headline words."""
    from rich.text import Text

    return Text(literal(text), style=style)


def dump_json(obj: Any, *, indent: int | None = 2) -> str:
    """Strict JSON text of ``obj`` (through :func:`flopwatch.io.jsonable`, the one JSON-safe converter)."""
    return json.dumps(jsonable(obj), indent=indent, allow_nan=False)


def echo_json(obj: Any, *, indent: int | None = 2) -> None:
    """Write ``obj`` to stdout as strict JSON, one trailing newline."""
    sys.stdout.write(dump_json(obj, indent=indent) + "\n")
    sys.stdout.flush()


def fmt_flops(x: float | None) -> str:
    """Compact scientific notation (``1.218e14``) so wide tables fit; ``—`` for missing."""
    if x is None or not math.isfinite(x):
        return "—"
    mant, exp = f"{x:.3e}".split("e")
    return f"{mant}e{int(exp)}"


def fmt_num(v: float | None, digits: int) -> str:
    """Fixed-point with ``digits`` decimals; ``—`` for missing or non-finite."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:.{digits}f}"


def simulated_banner(con: Any, what: str) -> None:
    """The SIMULATED label in front of numbers that come from the simulator (never presented as measured)."""
    from rich.text import Text

    t = Text()
    t.append(" SIMULATED ", style="bold white on red")
    t.append(" " + literal(what))
    con.print(t)


def print_fit(con: Any, table: Any) -> None:
    """Print a rich ``table`` as it is where its lines fit the console; else (an 80-column terminal) one block of
    "column  value" lines per row, so that no cell is cut or wrapped a few letters at a time."""
    from rich.table import Table

    wide = con.measure(table, options=con.options.update_width(10_000)).maximum  # its width unwrapped
    cols = list(table.columns)
    if wide <= con.width or not cols or not table.row_count:
        con.print(table)
        return
    if table.title is not None:
        con.print(table.title, style="bold")
    cells = [list(c.cells) for c in cols]
    for i in range(table.row_count):
        if i:
            con.print()
        b = Table(show_header=False, box=None, padding=(0, 1, 0, 2))
        b.add_column(style="dim", no_wrap=True)
        b.add_column(overflow="fold")
        for c, col in zip(cols, cells, strict=True):
            b.add_row(c.header, col[i])
        con.print(b)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural only for n ≠ 1 ("1 GPU", "8 GPUs", "0 families" with ``plural``)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
