"""The ``flopwatch`` command line: a thin typer app.

Each area registers its commands from its own module (``register(app)``), so the modules stay small
and import their heavy dependencies lazily inside the commands: ``flopwatch --help`` must stay fast.

Every command is a module-level function; each module's ``register(app)`` adds its commands (one line each
in :func:`_register_all`). Shared output helpers (console, strict JSON, number formats) live in
:mod:`flopwatch.cli._output`; domain logic lives in the packages, never here.

Exit status (the one table; README "Exit status" repeats it):

* 0 — success;
* 1 — the command ran and found a failure (a ledger that does not verify, a sensor that broke mid-run);
* 2 — usage or input error: bad option or argument, bad file/record/field, a sensor not available here
  (an :class:`~flopwatch.errors.InputError` or any error whose ``exit_code`` is 2): one line on stderr;
* 130 — interrupted (Ctrl-C).

``--debug`` shows the traceback instead of the one line.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from typing import Any

import typer
from typer.main import get_command

try:  # typer >= 0.20 vendors its own copy of click
    from typer._click import exceptions as _cx  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older typer uses click itself
    from click import exceptions as _cx

from flopwatch import __version__
from flopwatch.cli import options
from flopwatch.cli._output import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, literal, new_app, plain_metavars
from flopwatch.errors import FlopwatchError

app = new_app(
    "Measure AI training compute (FLOPs) from accelerator side channels.",
    name="flopwatch",
    pretty_exceptions_enable=False,
    # help text prints literally (rich_markup_mode=None): "pip install 'flopwatch[nvidia]'", "[monitor] table"
    context_settings={"help_option_names": ["-h", "--help"]},
)


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
    # --debug is acted on by main(), which must know it before typer parses (to re-raise errors).


def _register_all() -> None:
    from flopwatch.cli import (
        bench_cmds,
        estimate_cmds,
        fleet_cmds,
        join_cmds,
        monitor_cmds,
        powermodel_cmds,
        run_cmds,
        sim_cmds,
        telemetry_cmds,
        verify_cmds,
        workload_cmds,
    )

    run_cmds.register(app)  # the main job first in `flopwatch --help`
    estimate_cmds.register(app)
    telemetry_cmds.register(app)
    join_cmds.register(app)
    workload_cmds.register(app)
    powermodel_cmds.register(app)
    bench_cmds.register(app)
    sim_cmds.register(app)
    monitor_cmds.register(app)
    verify_cmds.register(app)
    fleet_cmds.register(app)


_register_all()


@functools.cache
def command() -> Any:
    """The click command tree of ``app``, built once (typer rebuilds it on every ``app()`` call, ~50 ms; the
    app is complete once this module is imported)."""
    return plain_metavars(get_command(app))


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (``kill``, ``systemctl stop``, a closed terminal), raised where Ctrl-C would be: every
    command already stops cleanly on KeyboardInterrupt (a recording closes its Parquet file, ``run`` marks its
    directory INCOMPLETE), which a default SIGTERM skipped — the process died mid-write and left partial
    files that looked complete."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _terminate_like_interrupt() -> Iterator[None]:
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # handlers can only be set there
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise Terminated(signum)

    sigs = [s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None]
    old = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
        if old[s] is not signal.SIG_IGN:  # nohup: an ignored SIGHUP stays ignored
            signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def _tolerant_streams() -> None:
    """Tables say "—" and "±": on a stream that cannot encode them (PYTHONIOENCODING=ascii, a latin-1 terminal)
    print them escaped rather than die with UnicodeEncodeError after the work is done."""
    for stream in (sys.stdout, sys.stderr):
        enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if enc != "utf8" and callable(getattr(stream, "reconfigure", None)):
            stream.reconfigure(errors="backslashreplace")


def _check_environment() -> None:
    """The FLOPWATCH_* variables, parsed as strictly as options before any work: a malformed peak override
    used to be swallowed by the device resolver, which then called the device unknown and dropped its
    datasheet bounds without a word."""
    import os

    from flopwatch.errors import InputError
    from flopwatch.io import max_input_bytes

    max_input_bytes()
    text = os.environ.get("FLOPWATCH_PEAK_FLOPS", "")
    if text.strip():  # devices.py is imported only then: `flopwatch --help` stays fast
        from flopwatch.devices import PEAK_OVERRIDE_ENV, parse_peak_overrides

        try:
            parse_peak_overrides(text)
        except InputError as e:
            raise InputError(e.detail, field=f"${PEAK_OVERRIDE_ENV}") from None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``flopwatch`` console script. Returns (and exits with) the status code."""
    # old spellings (--out, --dtype, --threshold-flops) still parse: documented commands keep working
    args = options.respell(list(sys.argv[1:] if argv is None else argv))
    debug = "--debug" in args
    _tolerant_streams()
    try:
        _check_environment()
        with _terminate_like_interrupt():
            rv = command().main(args=args, prog_name="flopwatch", standalone_mode=False)
    except typer.Exit as e:
        code = e.exit_code
    except typer.Abort:
        print("flopwatch: aborted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except _cx.NoArgsIsHelpError as e:
        e.show()
        code = EXIT_OK
    except _cx.ClickException as e:  # usage errors: bad option, missing argument — one line, like InputError
        ctx = getattr(e, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        print(f"flopwatch: error: {literal(e.format_message())}{hint}", file=sys.stderr)
        code = EXIT_USAGE
    except FlopwatchError as e:
        if debug:
            raise
        print(f"flopwatch: error: {literal(e)}", file=sys.stderr)
        code = e.exit_code
    except ModuleNotFoundError as e:
        if debug or (e.name or "").split(".")[0] != "torch":
            raise
        # an optional extra, not a bug: say how to get it (a usage error, like a sensor this machine lacks)
        print(
            "flopwatch: error: this command needs torch, which is not installed (pip install 'flopwatch[torch]')",
            file=sys.stderr,
        )
        code = EXIT_USAGE
    except Terminated as e:
        import signal

        print(f"flopwatch: terminated ({signal.Signals(e.signum).name})", file=sys.stderr)
        code = 128 + e.signum  # the shell's status for a process a signal ended
    except KeyboardInterrupt:
        print("flopwatch: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    except Exception as e:
        # A full disk met by a streaming writer (pyarrow, a worker thread): one line and exit 2, not a traceback.
        from flopwatch.io import disk_error

        why = disk_error(e)
        if why is None or debug:
            raise
        print(f"flopwatch: error: {literal(why)}", file=sys.stderr)
        code = EXIT_USAGE
    else:
        code = rv if isinstance(rv, int) else EXIT_OK
    if argv is None:
        sys.exit(code)
    return code
