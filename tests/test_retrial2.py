"""The second retrial's small defects (issue 24): each as the newcomer met it."""

from __future__ import annotations

import pytest

from flopwatch.cli import main
from flopwatch.errors import InputError
from flopwatch.io import parse_json


def test_json_error_says_at_once() -> None:
    with pytest.raises(InputError) as e:
        parse_json('{"a": "unterminated', line=3)
    assert " at at " not in str(e.value) and "column" in str(e.value)


@pytest.mark.parametrize(("value", "hint"), [("1.5", False), ("90", True)])
def test_confidence_percent_hint_only_for_a_percent(tmp_path, capsys, value: str, hint: bool) -> None:
    (tmp_path / "r.jsonl").write_text("{}\n", encoding="utf-8")
    assert (
        main(["calibrate", str(tmp_path / "r.jsonl"), "-o", str(tmp_path / "p.json"), "--confidence", value])
        == 2
    )
    err = capsys.readouterr().err
    assert ("did you mean 0.9?" in err) == hint and ("did you mean 0.015" not in err)


def test_unreachable_prometheus_names_the_option(capsys) -> None:
    rc = main(["fleet", "estimate", "--prometheus", "http://127.0.0.1:9", "--start", "0", "--end", "3600",
               "--retries", "0", "--timeout", "2"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "option '--prometheus'" in err and err.count("\n") == 1, err


def test_job_map_bad_time_names_file_row_and_field(tmp_path, capsys) -> None:
    m = tmp_path / "jobs.csv"
    m.write_text("job,gpu,start,end\nj1,GPU-1,0,3600\nj2,GPU-2,yesterday,3600\n", encoding="utf-8")
    rc = main(["fleet", "estimate", "--prometheus", "http://127.0.0.1:9", "--start", "0", "--end", "3600",
               "--job-map", str(m), "--retries", "0", "--timeout", "2"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and str(m) in err and "start" in err and "1" in err and err.count("\n") == 1, err
