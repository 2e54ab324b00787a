"""No command overwrites one of its inputs; outputs are written atomically.

The issue's cases (`calibrate R -o R`, `powermodel fit X.csv -o X.csv`, …) and their disguises (another
spelling of the path, a symlink, a hard link) through the real CLI: exit 2, one line naming the output
option, and the input byte-for-byte unchanged.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from flopwatch.cli import main

sys.path.insert(0, str(Path(__file__).parent / "hostile"))
import make_corpus  # noqa: E402


def _records(tmp: Path) -> Path:
    p = tmp / "runs.jsonl"
    p.write_text(make_corpus.jsonl(make_corpus.good_records()))
    return p


def _csv(tmp: Path) -> Path:
    p = tmp / "agg.csv"
    p.write_text(make_corpus.csv_text())
    return p


def _schedule(tmp: Path) -> Path:
    p = tmp / "sched.json"
    p.write_text(
        '[{"label": "w", "flops_per_step": 1e12, "bytes_per_step": 1e9, "tokens_per_step": 1024, "steps": 5}]'
    )
    return p


# (make the input, argv given input path IN and output path OUT, the output option named in the error)
CASES: list[tuple[Callable[[Path], Path], Callable[[str, str], list[str]], str]] = [
    (_records, lambda i, o: ["calibrate", i, "-o", o], "--output"),
    (_records, lambda i, o: ["evaluate", i, "--figures", o], "--figures"),
    (_csv, lambda i, o: ["powermodel", "fit", i, "--gpu", "A100", "-o", o], "--output"),
    (_schedule, lambda i, o: ["sim", "trace", "a100", "--schedule", i, "-o", o], "--output"),
    (
        _schedule,
        lambda i, o: ["sim", "trace", "a100", "--schedule", i, "-o", o + ".parquet", "--records", o],
        "--records",
    ),  # fmt: skip
    (_records, lambda i, o: ["join", "trace.parquet", i, "-o", o], "--output"),
    (_records, lambda i, o: ["record", "--sensor", f"replay:{i}", "--duration", "1", "-o", o], "--output"),
]


def _spellings(tmp: Path, inp: Path) -> dict[str, str]:
    (tmp / "sub").mkdir()
    (tmp / "link").symlink_to(inp)
    os.link(inp, tmp / "hard")
    return {
        "same": str(inp),
        "dotted": str(tmp / "sub" / ".." / inp.name),
        "symlink": str(tmp / "link"),
        "hardlink": str(tmp / "hard"),
    }


@pytest.mark.parametrize("spelling", ["same", "dotted", "symlink", "hardlink"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_output_is_never_an_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: int, spelling: str
) -> None:
    make, argv_of, option = CASES[case]
    inp = make(tmp_path)
    before = inp.read_bytes()
    out = _spellings(tmp_path, inp)[spelling]
    code = main(argv_of(str(inp), out))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("flopwatch: error: "), err
    assert f"option '{option}'" in err[0] and "is also an input" in err[0], err[0]
    assert inp.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["sub", "link", "hard", inp.name])


def test_directory_as_output_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rec = _records(tmp_path)
    d = tmp_path / "adir"
    d.mkdir()
    assert main(["calibrate", str(rec), "-o", str(d)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a directory" in err[0]


def test_profile_is_replaced_atomically(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rec = _records(tmp_path)
    prof = tmp_path / "p.json"
    prof.write_text("old profile")
    os.chmod(prof, 0o600)
    assert main(["calibrate", str(rec), "-o", str(prof), "--model", "eq2"]) == 0
    assert prof.read_text().startswith("{") and (prof.stat().st_mode & 0o777) == 0o600  # mode kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "runs.jsonl"]  # no temp file left


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["calibrate", "{rec}", "-o", "{fifo}"], "--output"),
        (["sim", "trace", "a100", "--schedule", "{sched}", "-o", "{fifo}"], "--output"),
        (
            ["sim", "trace", "a100", "--schedule", "{sched}", "-o", "{tmp}/t.parquet", "--records", "{fifo}"],
            "--records",
        ),
        (["workload", "run", "--sweep", "jetson-fp32", "--label", "x", "--records", "{fifo}"], "--records"),
    ],
)
def test_fifo_as_output_is_refused_before_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], option: str
) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    subs = {"{rec}": str(_records(tmp_path)), "{sched}": str(_schedule(tmp_path)), "{fifo}": str(fifo)}
    subs["{tmp}"] = str(tmp_path)
    args = [a for a in argv]
    for k, v in subs.items():
        args = [a.replace(k, v) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"option '{option}'" in err[0] and "FIFO" in err[0], err
    assert not (tmp_path / "t.parquet").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_append_record_never_blocks_on_a_fifo(tmp_path: Path) -> None:
    from flopwatch.errors import InputError
    from flopwatch.records import append_record

    fifo = tmp_path / "runs.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="FIFO"):
        append_record(fifo, {"label": "a", "net_energy_j": 1.0, "duration_s": 1.0})


@pytest.mark.parametrize("kind", ["ledger", "key", "companion"])
def test_no_output_replaces_a_ledger_or_a_key(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str):
    """`calibrate R -o L.db` (or onto its key, or a companion file) is refused: a ledger and its key are never an
    output, whatever the command (io.check_output_file behind every output guard)."""
    import sqlite3

    ledger = tmp_path / "l.db"
    con = sqlite3.connect(ledger)
    con.execute("create table t(x)")
    con.commit()
    con.close()
    target = {"ledger": ledger, "key": tmp_path / "k.pem", "companion": tmp_path / "l.db.lock"}[kind]
    if kind == "key":
        target.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    elif kind == "companion":
        target.write_text("1234\n")
    before = target.read_bytes()
    rc = main(["calibrate", str(_records(tmp_path)), "-o", str(target)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("flopwatch: error:") and str(target) in err[0]
    assert target.read_bytes() == before
