"""The newcomer's defects of 2026-12-01 (shared/reviews/2026-12-01-newcomer.md), each checked the way it was found:
the terminal summary of `run`, the report at phone width, one name for a wrong "below", `workload sweeps frontier`,
and one spelling per option."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flopwatch.cli import command, main
from flopwatch.cli.options import DEPRECATED_SPELLINGS, respell


def _depth(text: str) -> int:
    d = best = 0
    for ch in text:
        d += (ch == "(") - (ch == ")")
        best = max(best, d)
    return best


@pytest.fixture(scope="module")
def run_out(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    out = tmp_path_factory.mktemp("run") / "out"
    import contextlib  # capsys is function-scoped: capture by hand
    import io

    o, e = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        code = main(["run", "--quick", "--device", "auto", "--no-progress", "-o", str(out)])
    assert code == 0, e.getvalue()
    return out, o.getvalue(), e.getvalue()


def test_run_prints_the_headline_verdict_and_a_plain_device_sentence(run_out) -> None:  # noqa: ANN001
    out, stdout, stderr = run_out
    brief = json.loads((out / "summary.json").read_text())["headline"]["brief"]
    flat = " ".join(stdout.split())
    # defect 5: a verdict line, in the same words as summary.json's headline (its three-line brief; the report and
    # summary.json keep the whole paragraph)
    assert "verdict (simulated): " in flat
    for k, v in brief.items():
        assert f"{k} " + " ".join(v.split()) in flat
    device = next(ln for ln in stderr.splitlines() if ln.startswith("device: "))
    assert _depth(device) <= 1, device  # no nested parentheses
    assert "simulated A100" in device


def test_report_names_the_error_once_and_fits_a_phone(run_out) -> None:  # noqa: ANN001
    out, _, _ = run_out
    html = (out / "report.html").read_text()
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html)
    for old in ("wrongly cleared", "false negative", "false-negative", "FP/FN"):
        assert old not in text, old
    # defect 9: in the threshold table the two errors come right after the threshold
    head = re.search(r"<tr><th class='l'>threshold T</th>(.*?)</tr>", text).group(1)
    assert re.findall(r"<th>([^<]*)</th>", head)[:2] == ["wrong below", "wrongly accused"]
    assert "The table scrolls sideways" in text
    # every figure opens full size: a link to its PNG beside the report
    links = re.findall(r"<a href='(figures/[^']+\.png)' title='open full size'>", text)
    assert links and all((out / href).is_file() for href in links)
    assert "(simulated) (power model" not in text and "The default model <code>default</code>" not in text


def test_report_says_its_held_out_belows_are_not_the_cli_verdicts(run_out) -> None:  # noqa: ANN001
    # second round: the held-out 'below' of the calibrated interval is not a verdict; the report's verdict table
    # comes from the sound assessment (estimate.verdict.assess), as the CLI verdicts do, and the two are apart
    out, _, _ = run_out
    text = " ".join((out / "report.html").read_text().split())
    assert "Verdicts on held-out runs (sound bounds, as <code>flopwatch estimate</code> judges" in text
    assert "intervals; its accuracy, not a verdict)</h3>" in text
    assert "'below' needs the sound upper bound" in text and "no verifier's 'below' rests on them" in text
    assert text.index("Verdicts on held-out runs") < text.index("its accuracy, not a verdict)</h3>")
    # the phone hint sits above tables wider than a phone (the threshold table), not above the narrow ones
    from flopwatch.report.html import _NARROW_PX, _min_width_px

    tables = re.findall(
        r"(<p class='hint'>[^<]*</p> ?)?<div class='scroll'><table>(<tr>.*?</tr>)(.*?)</table>", text
    )
    wide = [_min_width_px(head, [body]) > _NARROW_PX for _, head, body in tables]
    assert any(wide) and not all(wide)
    assert all(bool(hint) == w for (hint, _, _), w in zip(tables, wide, strict=True))


def test_threshold_figure_counts_uncertain_separately() -> None:
    from flopwatch.report.html import _CAPTIONS

    cap = _CAPTIONS["threshold_rates"]
    assert "uncertain (dotted), is plotted on its own and counted as neither error" in cap


def test_workload_sweeps_knows_runs_default_sweep(capsys) -> None:  # noqa: ANN001
    from flopwatch.pipeline.plan import frontier_sweep

    assert main(["workload", "sweeps", "--json"]) == 0
    names = [s["name"] for s in json.loads(capsys.readouterr().out)]
    assert names[0] == "frontier"
    assert main(["workload", "sweeps", "frontier", "--quick", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in rows] == [c.to_dict()["label"] for c in frontier_sweep("bf16", quick=True)]


def _walk(cmd: object, path: str = "flopwatch"):
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _walk(sub, f"{path} {name}")


def test_one_spelling_per_option_and_the_old_ones_still_parse(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    opts = {o for _, c in _walk(command()) for p in c.params for o in getattr(p, "opts", [])}
    assert not opts & set(DEPRECATED_SPELLINGS), opts & set(DEPRECATED_SPELLINGS)
    assert {"--output", "--precision", "--threshold"} <= opts
    assert respell(["sim", "trace", "--out=x", "--dtype", "bf16", "--threshold-flops", "1e9", "--outx"]) == [
        "sim", "trace", "--output=x", "--precision", "bf16", "--threshold", "1e9", "--outx",
    ]  # fmt: skip
    # a documented old spelling still works end to end
    sched = tmp_path / "s.toml"
    sched.write_text(
        '[[schedule]]\nidle_s = 5\n[[schedule]]\nlabel = "w"\nflops_per_step = 1e13\nbytes_per_step = 1e9\ntokens_per_step = 512\nduration_s = 10\n'
    )
    assert main(["sim", "trace", "a100", "--schedule", str(sched), "--out", str(tmp_path / "t.parquet")]) == 0
    assert (tmp_path / "t.parquet").is_file()


EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "study-a100.toml"


def test_the_readme_example_schedule_loads_and_join_says_simulated(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """Defect 7: the README's step-by-step study on the simulator uses examples/study-a100.toml verbatim (the
    README and this file name it); a trace from the simulator makes `join` print the SIMULATED label."""
    from flopwatch.sim.sensor import Run, load_schedule

    items = load_schedule(EXAMPLE)
    runs = [it for it in items if isinstance(it, Run)]
    assert len(runs) == 10
    readme = (EXAMPLE.parents[1] / "README.md").read_text()
    assert "--schedule examples/study-a100.toml" in readme and "--precision bf16" in readme

    sched = tmp_path / "s.toml"  # two short runs of the same format: the join's label, quickly
    sched.write_text(
        '[[schedule]]\nidle_s = 20\n[[schedule]]\nlabel = "a"\nflops_per_step = 2e13\nbytes_per_step = 1e9\ntokens_per_step = 512\nduration_s = 20\n'
        "[[schedule]]\nidle_s = 10\n"
    )
    t, r = tmp_path / "t.parquet", tmp_path / "r.jsonl"
    assert main(["sim", "trace", "a100", "--schedule", str(sched), "-o", str(t), "--records", str(r)]) == 0
    capsys.readouterr()
    assert main(["join", str(t), str(r), "-o", str(tmp_path / "j.jsonl")]) == 0
    assert "SIMULATED" in capsys.readouterr().out


def test_a_replayed_seed_trace_takes_the_replays_wall_clock_not_the_files_mtime(
    timeseries_path: Path,
) -> None:
    """Defect 11: the seed's timeseries.json records no wall clock; its replay must not invent one from the file's
    modification time (the ledger showed a workload starting 27 min before it was replayed)."""
    import os

    from flopwatch.telemetry.sensors.base import VirtualClock
    from flopwatch.telemetry.sensors.replay import ReplaySensor

    wall0 = 1.9e9  # the replay's clock: far from the file's mtime, so the two cannot agree by chance
    clock = VirtualClock(t0=0.0, wall0=wall0)
    s = ReplaySensor(timeseries_path, clock=clock)
    clock.sleep_until(65.0)
    r = s.read()
    assert r.wall_time == pytest.approx(wall0 + r.t_s, abs=1.0)
    assert abs(r.wall_time - os.path.getmtime(timeseries_path)) > 1e6


def test_a_mistyped_command_suggests_only_close_names(capsys) -> None:  # noqa: ANN001
    assert main(["estimat"]) == 2
    err = capsys.readouterr().err
    assert "Did you mean 'estimate'?" in err and "'sim'" not in err


def test_an_option_is_named_an_option_in_errors(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert main(["run", "--device", "cuda:x", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "option '--device'" in err and "field" not in err


def test_the_main_job_is_the_first_command_in_help(capsys) -> None:  # noqa: ANN001
    # second round: `run` was tenth of eighteen in `flopwatch --help`
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out.split("Commands:", 1)[1].split()
    assert listed[0] == "run"
