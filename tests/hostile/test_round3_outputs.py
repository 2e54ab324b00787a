"""Round 3: writers never write through a link, leave nothing behind, and a full disk is one line (issue 25).

Findings reproduced: `sim openmetrics --force` wrote through a symlinked `.truth.json` (or output), destroying the
target; a killed `sim openmetrics --gpus 100000` left 18 GB in a hidden `.fleet-*` folder; `calibrate -o` and
`sim openmetrics` onto a full disk gave a traceback and exit 0 or 1.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from flopwatch.cli import main

REPO = Path(__file__).resolve().parents[2]
SMALL_FLEET = ["--gpus", "2", "--gpus-per-node", "2", "--hours", "0.5"]


def _cli(args: list[str], *, fsize: int | None = None, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a child, optionally under RLIMIT_FSIZE (a disk that takes only ``fsize`` bytes a file)."""

    def limit() -> None:
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG from write(), as ENOSPC on a full disk
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, "-m", "flopwatch", *args],
        cwd=cwd,
        env=env,
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("flopwatch: error:"), r.stderr
    return lines[0]


def test_openmetrics_force_never_writes_through_symlinks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "victim-a").write_text("precious a")
    (tmp_path / "victim-b").write_text("precious b")
    (tmp_path / "h.om.truth.json").symlink_to(tmp_path / "victim-b")
    # a symlinked ground truth: refused before any work (io's one output guard), the target untouched
    assert main(["sim", "openmetrics", "-o", str(tmp_path / "h.om"), *SMALL_FLEET, "--force"]) == 2
    assert "link" in capsys.readouterr().err
    (tmp_path / "h.om.truth.json").unlink()
    (tmp_path / "h.om").symlink_to(tmp_path / "victim-a")
    assert main(["sim", "openmetrics", "-o", str(tmp_path / "h.om"), *SMALL_FLEET, "--force"]) == 2
    assert "link" in capsys.readouterr().err
    assert (tmp_path / "victim-a").read_text() == "precious a"
    assert (tmp_path / "victim-b").read_text() == "precious b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.om", "victim-a", "victim-b"]


def test_a_killed_writers_leftovers_are_removed_by_the_next_run(tmp_path: Path) -> None:
    # What a killed run leaves: a scratch folder and a temporary file named after the output and its writer's pid.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)  # that process has exited
    (tmp_path / f"h.om.partial-{pid}-x1").mkdir()
    (tmp_path / f"h.om.partial-{pid}-x1" / "00").write_text("x" * 1000)
    (tmp_path / f"h.om.partial-{pid}-y2.tmp").write_text("half a file")
    assert main(["sim", "openmetrics", "-o", str(tmp_path / "h.om"), *SMALL_FLEET]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.om", "h.om.truth.json"]


def test_openmetrics_onto_a_full_disk_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "h.om").write_text("old history\n")
    r = _cli(["sim", "openmetrics", "-o", "h.om", *SMALL_FLEET, "--force"], fsize=200_000, cwd=tmp_path)
    line = _one_error_line(r)
    assert "h.om" in line and "cannot write" in line
    assert (tmp_path / "h.om").read_text() == "old history\n"  # nothing half-written, the old file kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.om"]


def test_calibrate_onto_a_full_disk_is_one_line(tmp_path: Path, v2_records_path: Path) -> None:
    r = _cli(["calibrate", str(v2_records_path), "-o", "p.json"], fsize=1_000, cwd=tmp_path)
    line = _one_error_line(r)
    assert "p.json" in line and "cannot write" in line
    assert list(tmp_path.iterdir()) == []


def test_a_fleet_that_cannot_fit_on_the_disk_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import collections
    import shutil

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**12, 0, 50 * 10**9))  # 50 GB free
    assert main(["sim", "openmetrics", "-o", str(tmp_path / "big.om"), "--gpus", "100000"]) == 2
    err = capsys.readouterr().err
    assert "GB" in err and "free" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["record", "--sensor", "sim:a100", "--rate", "50", "--duration", "600", "-o", "r.parquet"],
        ["sim", "trace", "a100", "--schedule", "s.json", "-o", "t.parquet", "--rate", "100"],
    ],
)
def test_a_streaming_recording_onto_a_full_disk_is_one_line(tmp_path: Path, args: list[str]) -> None:
    """Same class, found beside the issue's two: the streaming Parquet writer (pyarrow, a worker thread)."""
    (tmp_path / "s.json").write_text('[{"idle_s": 600}]')
    r = _cli(args, fsize=20_000, cwd=tmp_path)
    assert "cannot write" in _one_error_line(r)
