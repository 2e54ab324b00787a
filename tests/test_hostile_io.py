"""flopwatch.io: the safe reading and atomic writing every loader and writer goes through."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from flopwatch.errors import InputError, ProfileError
from flopwatch.io import (
    OutOfRange,
    atomic_path,
    atomic_write,
    check_not_input,
    parse_json,
    parse_toml,
    read_bytes,
    read_json,
    read_text,
)

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


@needs_fifo
def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    # open() on a FIFO with no writer blocks forever; the check happens on stat, before any open
    with pytest.raises(InputError, match=r"pipe\.json: is a FIFO \(named pipe\)"):
        read_text(fifo, kind="records file")


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero")
def test_character_device_is_refused() -> None:
    with pytest.raises(InputError, match="/dev/zero: is a character device"):
        read_bytes("/dev/zero")


def test_directory_missing_and_nul_paths(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory, expected a CSV file"):
        read_bytes(tmp_path, kind="CSV file")
    with pytest.raises(InputError, match="no such file"):
        read_bytes(tmp_path / "absent")
    with pytest.raises(InputError, match="not a valid path"):
        read_bytes(str(tmp_path / "a\0b"))
    with pytest.raises(InputError, match="parent is not a directory"):
        (tmp_path / "f").write_text("x")
        read_bytes(tmp_path / "f" / "g")


def test_size_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "big.json"
    p.write_bytes(b" " * 1000 + b"[]")
    with pytest.raises(InputError, match="larger than the 100-byte limit"):
        read_bytes(p, max_bytes=100)
    monkeypatch.setenv("FLOPWATCH_MAX_INPUT_BYTES", "10")
    with pytest.raises(InputError, match="10-byte limit"):
        read_json(p)
    monkeypatch.setenv("FLOPWATCH_MAX_INPUT_BYTES", "nonsense")  # refused like a bad option (issue 25)
    with pytest.raises(InputError, match="FLOPWATCH_MAX_INPUT_BYTES"):
        read_json(p)
    monkeypatch.setenv("FLOPWATCH_MAX_INPUT_BYTES", "")  # empty: the default applies
    assert read_json(p) == []


def test_utf8_bom_and_binary(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_bytes(b"\xef\xbb\xbf[1]")
    assert read_json(p) == [1]
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match=r"is not UTF-8 text \(byte 0"):
        read_json(p)


def test_deep_nesting_is_one_error() -> None:
    for text in ("[" * 100_000, '{"a":' * 100_000, "[" * 100_000 + "]" * 100_000):
        with pytest.raises(InputError, match="nested more than"):
            parse_json(text, file="deep.json")
    # deep but within the parser's limit: still refused before any code walks it recursively
    with pytest.raises(InputError, match="nested more than 200"):
        parse_json("[" * 500 + "]" * 500)
    assert parse_json("[" * 50 + "]" * 50) is not None


def test_numbers_out_of_float_range() -> None:
    big = "9" * 5000  # Python refuses > 4300-digit int strings: must not escape as ValueError
    doc = parse_json(f'{{"a": {big}, "b": 1e999, "c": -1e999, "d": 12, "e": 1.5}}')
    assert isinstance(doc["a"], OutOfRange) and doc["a"] == float("inf")
    assert doc["a"].literal.startswith("999999999999…(5000 characters)")
    assert doc["b"].literal == "1e999" and doc["c"] == float("-inf")
    assert doc["d"] == 12 and isinstance(doc["d"], int) and doc["e"] == 1.5
    assert isinstance(parse_json("1" + "0" * 400), OutOfRange)


def test_error_class_and_line_are_kept() -> None:
    with pytest.raises(ProfileError, match=r"p\.json: line 2: invalid JSON"):
        parse_json('{\n"a": }', file="p.json", error=ProfileError)
    with pytest.raises(InputError, match=r"r\.jsonl: line 7: invalid JSON \(.* at column 2\)"):
        parse_json("{x", file="r.jsonl", line=7)


def test_toml_hostile() -> None:
    with pytest.raises(InputError, match="nested more than"):
        parse_toml("a = " + "[" * 100_000, file="c.toml")
    with pytest.raises(InputError, match="invalid TOML"):
        parse_toml("a = " + "9" * 5000, file="c.toml")
    with pytest.raises(InputError, match="invalid TOML"):
        parse_toml("a = [", file="c.toml")
    assert parse_toml("a = inf")["a"] == float("inf")  # refused later by the field validators


def test_atomic_write_replaces_and_keeps_mode(tmp_path: Path) -> None:
    p = tmp_path / "sub" / "out.json"
    atomic_write(p, "one\n")
    assert p.read_text() == "one\n" and stat.S_IMODE(p.stat().st_mode) == 0o644
    os.chmod(p, 0o600)
    atomic_write(p, b"two\n")
    assert p.read_bytes() == b"two\n" and stat.S_IMODE(p.stat().st_mode) == 0o600
    assert sorted(x.name for x in p.parent.iterdir()) == ["out.json"]  # no temp file left


def test_atomic_write_failure_leaves_old_file(tmp_path: Path) -> None:
    p = tmp_path / "out.json"
    p.write_text(json.dumps({"keep": True}))
    with pytest.raises(RuntimeError), atomic_path(p) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert json.loads(p.read_text()) == {"keep": True}
    assert [x.name for x in tmp_path.iterdir()] == ["out.json"]


@pytest.mark.parametrize("how", ["atomic_write", "atomic_path", "Trace.write", "TraceWriter", "journal"])
def test_no_writer_writes_through_a_symlink(tmp_path: Path, how: str) -> None:
    """Issue 25 item 4: one guard in io.py, used by every writer: the link and its target are left alone,
    and no temporary file is left behind."""
    from flopwatch.io import atomic_path
    from flopwatch.telemetry.schema import Reading
    from flopwatch.telemetry.trace import Trace

    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "out"
    link.symlink_to(victim)
    with pytest.raises(InputError, match="symbolic link") as ei:
        if how == "atomic_write":
            atomic_write(link, "new")
        elif how == "atomic_path":
            with atomic_path(link) as tmp:
                tmp.write_text("new")
        elif how == "Trace.write":
            Trace.from_readings([Reading(0.0, 0.0, "d", 1.0), Reading(1.0, 1.0, "d", 1.0)]).write(link)
        else:  # the streaming recorder: its Parquet file, or its journal, planted as a link
            from flopwatch.telemetry.writer import TraceWriter

            target = link if how == "TraceWriter" else tmp_path / "rec.parquet"
            if how == "journal":
                link.rename(tmp_path / "rec.parquet.journal")
                link = tmp_path / "rec.parquet.journal"
            with TraceWriter(target, {"kind": "test"}, overwrite=True) as w:
                w.write(Reading(0.0, 0.0, "d", 1.0))
    assert str(link) in str(ei.value)
    assert victim.read_text() == "precious" and link.is_symlink()
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted([link.name, "victim"])


def test_a_failed_atomic_path_leaves_no_temporary_file(tmp_path: Path) -> None:
    from flopwatch.io import atomic_path

    out = tmp_path / "t.parquet"
    with pytest.raises(RuntimeError), atomic_path(out) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith("t.parquet.partial-")  # named after its target
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_to_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        atomic_write(tmp_path, "x")


def test_check_not_input(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    a.write_text("{}\n")
    check_not_input(tmp_path / "b.json", [a, None])
    check_not_input(None, [a])
    with pytest.raises(InputError, match=r"a\.jsonl: option '-o': is also an input"):
        check_not_input(a, [a])
    # the same file under another spelling, a symlink and a hard link
    with pytest.raises(InputError, match="is also an input"):
        check_not_input(tmp_path / "." / "a.jsonl", [a])
    (tmp_path / "ln").symlink_to(a)
    with pytest.raises(InputError, match="is also an input"):
        check_not_input(tmp_path / "ln", [a])
    os.link(a, tmp_path / "hard")
    with pytest.raises(InputError, match="option '--out'"):
        check_not_input(tmp_path / "hard", [a], option="--out")
