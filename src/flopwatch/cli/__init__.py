"""The ``flopwatch`` command line: a thin typer app.

Each area registers its commands from its own module (``register(app)``), so the modules stay small
and import their heavy dependencies lazily inside the commands: ``flopwatch --help`` must stay fast.

Errors: an :class:`~flopwatch.errors.InputError` (or a usage error) prints one line on stderr and exits
with status 2; other flopwatch errors exit 1. ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import sys

import typer

try:  # typer >= 0.20 vendors its own copy of click
    from typer._click import exceptions as _cx  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as _cx

from flopwatch import __version__
from flopwatch.errors import FlopwatchError

app = typer.Typer(
    name="flopwatch",
    help="Measure AI training compute (FLOPs) from accelerator side channels.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_STATE = {"debug": False}


def _version_cb(value: bool) -> None:
    if value:
        typer.echo(f"flopwatch {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of one-line errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version_cb, is_eager=True, help="Print the version."
    ),
) -> None:
    """flopwatch: independent estimates of training FLOPs from power and utilisation telemetry."""
    _STATE["debug"] = debug


def _register_all() -> None:
    from flopwatch.cli import (
        estimate_cmds,
        monitor_cmds,
        powermodel_cmds,
        run_cmds,
        telemetry_cmds,
        workload_cmds,
    )

    for mod in (estimate_cmds, telemetry_cmds, workload_cmds, powermodel_cmds, run_cmds, monitor_cmds):
        mod.register(app)
    from flopwatch.cli import fleet_cmds

    fleet_cmds.register(app)


_register_all()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``flopwatch`` console script. Returns (and exits with) the status code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        rv = app(args=args, prog_name="flopwatch", standalone_mode=False)
    except typer.Exit as e:
        code = e.exit_code
    except typer.Abort:
        print("flopwatch: aborted", file=sys.stderr)
        code = 130
    except _cx.NoArgsIsHelpError as e:
        e.show()
        code = 0
    except _cx.ClickException as e:  # usage errors: bad option, missing argument — one line, like InputError
        ctx = getattr(e, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        print(f"flopwatch: error: {e.format_message()}{hint}", file=sys.stderr)
        code = 2
    except FlopwatchError as e:
        if debug:
            raise
        print(f"flopwatch: error: {e}", file=sys.stderr)
        code = e.exit_code
    except KeyboardInterrupt:
        print("flopwatch: interrupted", file=sys.stderr)
        code = 130
    else:
        code = rv if isinstance(rv, int) else 0
    if argv is None:
        sys.exit(code)
    return code
