"""Ctrl-C during ``flopwatch run`` (newcomer report defect 4): a real SIGINT to a real process says
"interrupted", exits 130, marks the half-written directory INCOMPLETE, and the next run reuses it without --force."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flopwatch.cli.run_cmds import INCOMPLETE_FILE
from flopwatch.pipeline.layout import SUMMARY_FILE, TRACE_FILE
from flopwatch.pipeline.progress import Progress

SRC = Path(__file__).resolve().parents[1] / "src"


def _flopwatch(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, "-m", "flopwatch", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_sigint_during_run_says_interrupted_and_marks_the_directory(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = _flopwatch("run", "--quick", "-o", str(out))
    deadline = time.monotonic() + 60
    while not (out / TRACE_FILE).exists():  # the sweep has started writing: interrupt mid-run
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the run never started writing its trace"
        time.sleep(0.02)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, (stdout, stderr)
    assert stderr.strip().splitlines()[-1] == "flopwatch: interrupted", stderr
    assert "Traceback" not in stderr
    assert not (out / SUMMARY_FILE).exists()  # the run did not finish
    marker = (out / INCOMPLETE_FILE).read_text()
    assert "interrupted" in marker and "partial" in marker

    # the next run reuses the directory without --force, says so, and leaves it complete
    p = _flopwatch("run", "--quick", "-o", str(out), "--no-progress")
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stderr
    assert "interrupted run: reusing it" in stderr
    assert not (out / INCOMPLETE_FILE).exists() and (out / SUMMARY_FILE).is_file()


def test_a_directory_with_the_users_own_files_is_still_refused(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from flopwatch.cli import main

    out = tmp_path / "out"
    out.mkdir()
    (out / INCOMPLETE_FILE).write_text("interrupted\n")
    (out / "notes.txt").write_text("mine\n")
    assert main(["run", "--quick", "-o", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (out / "notes.txt").read_text() == "mine\n"


@pytest.mark.parametrize("done", [True, False])
def test_the_progress_bar_ends_at_done_only_when_the_run_finished(done: bool) -> None:
    import io

    from rich.console import Console

    buf = io.StringIO()
    prog = Progress(True, total=10.0, console=Console(file=buf, force_terminal=True, width=120))
    prog.stage("sweep: 3 of 19 workloads")
    prog.advance(3.0)
    prog.close(done=done)
    import re

    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())  # drop cursor and colour codes
    last = [ln for ln in text.splitlines() if ln.strip()][-1]
    if done:
        assert "done" in last and "100%" in last
    else:
        assert "stopped during: sweep: 3 of 19 workloads" in last and "30%" in last and "100%" not in last


def test_a_ctrl_c_swallowed_by_a_weakref_callback_is_raised_again():
    """Python prints a KeyboardInterrupt raised in a weakref callback (matplotlib's, while figures are drawn) as
    "Exception ignored" and drops it: the run would go on. ``run`` delivers it again, with no traceback."""
    import sys
    import weakref

    from flopwatch.cli.run_cmds import _interrupt_never_swallowed

    class Node:
        pass

    def callback(_ref: object) -> None:
        raise KeyboardInterrupt

    default = sys.unraisablehook
    reached_after = []
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with _interrupt_never_swallowed():
            n = Node()
            ref = weakref.ref(n, callback)
            del n  # the callback runs here; its KeyboardInterrupt goes to sys.unraisablehook
            time.sleep(5.0)  # the interrupt, raised again, lands in this ordinary code (at once)
            reached_after.append(ref)
    assert not reached_after and time.monotonic() - t0 < 4.0  # the block was stopped, not finished
    assert sys.unraisablehook is default  # restored


def test_ctrl_c_stops_the_monitor_cleanly_with_status_130(tmp_path: Path) -> None:
    """The monitor closes its ledger on Ctrl-C, says how it ended and exits 130 like every command (README's
    table); a replay at --speed 5 is still running when the signal comes."""
    data = Path(os.environ.get("FLOPWATCH_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "data"
    trace = data / "jetson_flop_estimator" / "writeup" / "timeseries.json"
    if not trace.is_file():
        pytest.skip(f"the study's trace is not at {trace}")
    led = tmp_path / "l.db"
    p = _flopwatch("monitor", "--sensor", f"replay:{trace}", "--speed", "5", "--ledger", str(led), "-q")
    deadline = time.monotonic() + 60
    while not led.exists():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the monitor never created its ledger"
        time.sleep(0.05)
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 130, (stdout, stderr)
    assert "flopwatch monitor: SIGINT;" in stdout and "Traceback" not in stderr
