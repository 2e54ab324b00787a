"""The CLI's one style: every option documented, help printed literally, user text printed literally, exit codes."""

from __future__ import annotations

import ast
import io
import json
import math
from pathlib import Path

import typer
from typer.main import get_command

from flopwatch.cli import app, main
from flopwatch.cli._output import EXIT_USAGE, console, dump_json, literal

CLI_DIR = Path(__file__).resolve().parents[1] / "src" / "flopwatch" / "cli"


def _walk(cmd: object, path: str = "flopwatch"):
    """Every command under ``cmd``. Walks ``.commands`` rather than testing ``isinstance(cmd, click.Group)``:
    typer 0.29 builds its own vendored click classes (``typer._click``), which a separately installed click
    does not recognise, so an isinstance walk silently stops at the root."""
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _walk(sub, f"{path} {name}")


def test_every_option_of_every_command_has_help() -> None:
    commands = list(_walk(get_command(app)))
    # the walk must reach every command and group (37 when this was written: the root, 5 groups, 31 commands),
    # so the check below cannot become vacuous again
    assert len(commands) >= 37, [path for path, _ in commands]
    missing = []
    for path, cmd in commands:
        for p in cmd.params:
            if p.param_type_name == "option" and not p.hidden and not (p.help or "").strip():
                missing.append(f"{path} {p.opts[0]}")
    assert not missing, f"options without help text: {missing}"


def test_no_help_shows_a_python_type_as_metavar(capsys) -> None:  # noqa: ANN001
    # typer 0.29 writes a list argument or repeatable option as ``<list[Path]>`` unless it declares a metavar
    leaked = []
    for path, _ in _walk(get_command(app)):
        assert main([*path.split()[1:], "--help"]) == 0
        out = capsys.readouterr().out
        if "list[" in out:
            leaked.append(path)
    assert not leaked, f"help shows a Python type: {leaked}"


def test_help_prints_brackets_literally(capsys) -> None:  # noqa: ANN001
    code = main(["monitor", "--help"])
    out = capsys.readouterr().out
    assert code == 0
    assert "([monitor] table)" in out


def test_commands_are_module_level_functions() -> None:
    """No command defined as a closure inside register(): each module's register only adds commands."""
    for f in CLI_DIR.glob("*.py"):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "register":
                inner = [n for n in ast.walk(node) if isinstance(n, ast.FunctionDef) and n is not node]
                assert not inner, f"{f.name}: register() defines {[n.name for n in inner]}"


def test_console_prints_user_text_literally() -> None:
    buf = io.StringIO()
    con = console(width=200)
    con.file = buf
    con.print("pip install 'flopwatch[nvidia]' [bold]x[/] \x1b[31mred\x07")
    out = buf.getvalue()
    assert "flopwatch[nvidia]" in out and "[bold]x[/]" in out
    assert "\x1b" not in out and "\\x1b[31mred\\x07" in out


def test_literal_keeps_newlines_and_escapes_controls() -> None:
    assert literal("a\nb\tc") == "a\nb\tc"
    assert literal("a\x1bb\u202e") == "a\\x1bb\\u202e"


def test_dump_json_is_strict() -> None:
    import numpy as np

    d = json.loads(
        dump_json({"a": math.nan, "b": np.float64(1.5), "c": [np.int64(2), math.inf], 3: Path("x")})
    )
    assert d == {"a": None, "b": 1.5, "c": [2, None], "3": "x"}


def test_unavailable_sensor_is_a_usage_error(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    code = main(
        ["record", "--sensor", "rapl:" + str(tmp_path), "--duration", "1", "-o", str(tmp_path / "t.parquet")]
    )
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert err.startswith("flopwatch: error: ") and len(err.strip().splitlines()) == 1


def test_bad_option_is_exit_2(capsys) -> None:  # noqa: ANN001
    assert main(["detect", "--no-such-option"]) == EXIT_USAGE
    assert "no such option" in capsys.readouterr().err.lower()


def test_sub_apps_print_help_literally() -> None:
    from flopwatch.cli import powermodel_cmds, sim_cmds, workload_cmds

    for sub in (powermodel_cmds.pm_app, sim_cmds.sim_app, workload_cmds.workload_app):
        assert isinstance(sub, typer.Typer) and sub.rich_markup_mode is None


def test_a_command_needing_torch_says_so_without_it(capsys) -> None:  # noqa: ANN001
    """Runs under `pytest --without-torch` (or where torch is missing): one line, exit 2, how to install it."""
    import pytest

    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("torch is installed: run `python -m pytest --without-torch` to check this path")
    code = main(
        [
            "workload",
            "run",
            "--sweep",
            "quick",
            "--label",
            "d128_b8_s64_L3",
            "--steps",
            "1",
            "--device",
            "cpu",
        ]
    )
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "flopwatch[torch]" in err and len(err.strip().splitlines()) == 1
