"""Round 4: what happens around a command rather than in its files — the environment it runs in, the signals
that stop it, another command writing the same output, and a replay of the traces flopwatch itself records.
Each case failed before its fix (tracebacks, exit 0 over lost data, bounds silently dropped, false gaps).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from sim_jobs import SIM_JOB

from flopwatch.cli import main
from flopwatch.cli.run_cmds import INCOMPLETE_FILE
from flopwatch.errors import InputError
from flopwatch.io import check_output_file, open_output
from flopwatch.pipeline.layout import SUMMARY_FILE, TRACE_FILE

SRC = Path(__file__).resolve().parents[2] / "src"
_JOB = SIM_JOB


def _flopwatch(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, "-m", "flopwatch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**e, **(env or {})},
    )


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("sim")
    (d / "s.json").write_text(json.dumps([{"idle_s": 30}, _JOB, {"idle_s": 30}]))
    args = ["sim", "trace", "a100", "--schedule", str(d / "s.json"), "-o", str(d / "t.parquet")]
    assert main([*args, "--records", str(d / "r.jsonl"), "--seed", "4"]) == 0
    return d / "t.parquet", d / "r.jsonl"


# ------------------------------------------------------------------ the environment


@pytest.mark.parametrize("value", ["garbage", "a100:bf16=-1", "a100:bf16=nan", "h1000:bf16=1e15"])
def test_a_malformed_peak_override_is_one_line_before_any_work(
    sim: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, value: str
) -> None:  # noqa: ANN001
    """The resolver swallowed the parse error and called the device unknown: its datasheet bounds vanished
    (verdict upper bound None, "device unknown") and the command exited 0."""
    monkeypatch.setenv("FLOPWATCH_PEAK_FLOPS", value)
    assert main(["detect", str(sim[0])]) == 2
    err = capsys.readouterr().err
    assert err.count("flopwatch: error:") == 1 and "$FLOPWATCH_PEAK_FLOPS" in err, err
    monkeypatch.setenv("FLOPWATCH_PEAK_FLOPS", "a100:bf16=400e12")
    assert main(["detect", str(sim[0])]) == 0


def test_a_stream_that_cannot_encode_a_dash_gets_it_escaped(sim: tuple[Path, Path]) -> None:
    """PYTHONIOENCODING=ascii (or a latin-1 terminal): UnicodeEncodeError traceback on the table's "—"."""
    p = _flopwatch("detect", str(sim[0]), env={"PYTHONIOENCODING": "ascii"})
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and "Traceback" not in err, err
    assert "\\u2014" in out or "\\u2500" in out  # escaped, not lost


# ------------------------------------------------------------------ signals


def test_sigterm_during_run_marks_the_directory_incomplete(tmp_path: Path) -> None:
    """`kill` (or systemctl stop) killed `run` outright: partial profile/records with no INCOMPLETE mark."""
    out = tmp_path / "out"
    p = _flopwatch("run", "--quick", "-o", str(out), "--no-progress")
    deadline = time.monotonic() + 60
    while not (out / TRACE_FILE).exists():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the run never started writing its trace"
        time.sleep(0.02)
    p.send_signal(signal.SIGTERM)
    _, stderr = p.communicate(timeout=60)
    assert p.returncode in (130, 143) and "Traceback" not in stderr, stderr
    assert not (out / SUMMARY_FILE).exists()
    assert "partial" in (out / INCOMPLETE_FILE).read_text()


def test_sigterm_during_record_closes_the_trace(sim: tuple[Path, Path], tmp_path: Path) -> None:
    """A killed recording left a Parquet file without its footer (readable only through its journal)."""
    out = tmp_path / "rec.parquet"
    args = ["-s", f"replay:{sim[0]}", "--speed", "5", "--duration", "200", "--flush-every", "0.2"]
    p = _flopwatch("record", *args, "-o", str(out))
    deadline = time.monotonic() + 60
    while not out.exists():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 0 and "(interrupted)" in stdout, (stdout, stderr)
    assert pq.ParquetFile(out).metadata.num_rows > 0  # a complete Parquet file: footer written
    assert not Path(str(out) + ".journal").exists()


# ------------------------------------------------------------------ two writers of one output


def test_a_file_a_live_writer_holds_is_never_an_output(tmp_path: Path) -> None:
    """A second `record -o same --force` truncated the first one's file under it; both wrote into one inode
    and exited 0."""
    path = tmp_path / "t.parquet"
    first = open_output(path)
    first.write(b"PAR1 live data")
    first.flush()
    try:
        with pytest.raises(InputError, match="being written by another process"):
            check_output_file(path)
        with pytest.raises(InputError, match="being written by another process"):
            open_output(path)
        assert path.read_bytes() == b"PAR1 live data"  # not truncated by the refused writer
    finally:
        first.close()
    check_output_file(path)  # released with its writer
    open_output(path).close()


def test_a_second_recording_onto_a_live_one_is_refused(
    sim: tuple[Path, Path], tmp_path: Path, capsys
) -> None:  # noqa: ANN001
    out = tmp_path / "rec.parquet"
    p = _flopwatch(
        "record", "-s", f"replay:{sim[0]}", "--speed", "5", "--duration", "200", "--flush-every", "0.2",
        "-o", str(out),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not out.exists() or out.stat().st_size == 0:
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert main(["record", "-s", "sim:a100", "--duration", "5", "-o", str(out), "--force"]) == 2
        assert "being written by another process" in capsys.readouterr().err
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
    assert pq.ParquetFile(out).metadata.num_rows > 0


# ------------------------------------------------------------------ replaying flopwatch's own recordings


def test_a_jittered_recording_replays_at_its_rate_without_false_holes(
    sim: tuple[Path, Path], tmp_path: Path
) -> None:
    """The simulator and `record` jitter their sample instants (up to one period): replayed at its own rate,
    13 % of the ticks were reported as "a hole in the recording" although no row is missing."""
    out = tmp_path / "rr.parquet"
    args = ["record", "-s", f"replay:{sim[0]}", "--speed", "1000", "--duration", "100", "-o", str(out)]
    assert main([*args, "--json"]) == 0
    t = pq.read_table(out)
    assert t.num_rows >= 990 and t.column("gap_error").null_count == t.num_rows
