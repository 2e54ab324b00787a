"""The hostile-input corpus (tests/hostile/) through the real CLI: exit 2, one line naming the file, no traceback.

Each corpus file goes through the command a user would feed it to (``flopwatch.cli.main``, in process). Cases
that cannot live in git — a FIFO (used to hang), ``/dev/zero`` (MemoryError), a directory, nesting 100 000 deep
— are created here at test time for every loader. A refused command must also write nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from flopwatch.cli import main

HOSTILE = Path(__file__).parent / "hostile"
MANIFEST: dict[str, str] = json.loads((HOSTILE / "MANIFEST.json").read_text())


def _good_records(tmp: Path) -> Path:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_corpus", HOSTILE / "make_corpus.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    p = tmp / "good.jsonl"
    p.write_text(mod.jsonl(mod.good_records()))
    return p


# loader folder → argv for a file (tmp: a fresh directory for outputs and helper inputs)
COMMANDS: dict[str, Callable[[str, Path], list[str]]] = {
    "records": lambda f, tmp: ["calibrate", f, "-o", str(tmp / "out" / "profile.json")],
    "profile": lambda f, tmp: ["estimate", "--profile", f, str(_good_records(tmp))],
    "csv": lambda f, tmp: ["powermodel", "fit", f, "--gpu", "A100", "-o", str(tmp / "out" / "model.json")],
    "schedule": lambda f, tmp: [
        "sim",
        "trace",
        "a100",
        "--schedule",
        f,
        "-o",
        str(tmp / "out" / "t.parquet"),
    ],
    "config": lambda f, tmp: ["monitor", "--config", f],
    "fleet_schedule": lambda f, tmp: ["sim", "openmetrics", "--schedule", f, "-o", str(tmp / "out" / "f.om")],
    "powermodel": lambda f, tmp: [
        *("powermodel", "predict", "--model", f, "--gpu", "A100", "--dtype", "bf16"),
        *("--batch", "8", "--mfu", "1"),
    ],
}


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], file: str, tmp: Path) -> str:
    code = main(argv)
    cap = capsys.readouterr()
    err = cap.err.strip().splitlines()
    assert code == 2, (argv, code, cap.err[-2000:])
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith("flopwatch: error: "), line
    assert "Traceback" not in cap.err and "Traceback" not in cap.out
    assert file in line, line
    out = tmp / "out"
    assert not out.exists() or not any(out.iterdir()), "a refused command wrote output"
    return line


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_corpus_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str) -> None:
    kind = name.split("/")[0]
    f = str(HOSTILE / name)
    line = _refused(capsys, COMMANDS[kind](f, tmp_path), f, tmp_path)
    assert MANIFEST[name] in line, line


def test_corpus_is_complete() -> None:
    on_disk = {str(p.relative_to(HOSTILE)) for k in COMMANDS for p in (HOSTILE / k).glob("*") if p.is_file()}
    assert on_disk == set(MANIFEST), "run tests/hostile/make_corpus.py"
    assert set(COMMANDS) == {n.split("/")[0] for n in MANIFEST}


EXT = {"records": ".jsonl", "profile": ".json", "csv": ".csv", "schedule": ".json", "config": ".toml"}
EXT["powermodel"] = EXT["fleet_schedule"] = ".json"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize("kind", sorted(COMMANDS))
def test_fifo_input_does_not_hang(capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str) -> None:
    fifo = tmp_path / f"pipe{EXT[kind]}"
    os.mkfifo(fifo)
    line = _refused(capsys, COMMANDS[kind](str(fifo), tmp_path), str(fifo), tmp_path)
    assert "FIFO" in line


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
@pytest.mark.parametrize("kind", sorted(COMMANDS))
def test_dev_zero_input(capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str) -> None:
    line = _refused(capsys, COMMANDS[kind]("/dev/zero", tmp_path), "/dev/zero", tmp_path)
    assert "character device" in line


@pytest.mark.parametrize("kind", sorted(COMMANDS))
def test_directory_input(capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str) -> None:
    d = tmp_path / f"adir{EXT[kind]}"
    d.mkdir()
    line = _refused(capsys, COMMANDS[kind](str(d), tmp_path), str(d), tmp_path)
    assert "is a directory" in line


@pytest.mark.parametrize("kind", sorted(COMMANDS))
def test_nesting_100000_deep(capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str) -> None:
    deep = 100_000
    f = tmp_path / f"deep{EXT[kind]}"
    if kind == "config":
        f.write_text("sensors = " + "[" * deep + "]" * deep)
    elif kind == "csv":  # CSV does not nest: a 100 000-column header instead
        f.write_text(",".join(f"c{i}" for i in range(deep)) + "\n" + ",".join("1" * deep) + "\n")
    else:
        f.write_text("[" * deep + "]" * deep)
    _refused(capsys, COMMANDS[kind](str(f), tmp_path), str(f), tmp_path)
