"""Round 4 (issue 25's "next round of cases that will be tried without being shown"): hostile inputs found from
the inside, one class per section, each reproduced first and then fixed at the shared loader. Traces come from
flopwatch.sim (SIMULATED, seeded, raw workloads: no torch) and are then edited the way a file could be.

Classes: trace files read in pieces (names that are not UTF-8, a file replaced while it is read), a trace's
own metadata and columns, ambiguous JSON (a key twice), options naming hardware or a power that cannot be,
JSON Lines line breaks, records that contradict themselves, schedule items with keys nobody reads.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sim_jobs import SIM_JOB

from flopwatch.cli import main
from flopwatch.errors import InputError
from flopwatch.records import load_records
from flopwatch.telemetry.source import open_source

_JOB = SIM_JOB


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("sim")
    (d / "s.json").write_text(json.dumps([{"idle_s": 30}, _JOB, {"idle_s": 30}]))
    args = ["sim", "trace", "a100", "--schedule", str(d / "s.json"), "-o", str(d / "t.parquet")]
    assert main([*args, "--records", str(d / "r.jsonl"), "--rate", "4", "--seed", "4"]) == 0
    return d / "t.parquet", d / "r.jsonl"


def _one_line_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], *needles: str) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("flopwatch: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _rewrite(src: Path, dst: Path, *, metadata: bytes | None = None, table: pa.Table | None = None) -> Path:
    t = pq.read_table(src) if table is None else table
    md = dict(pq.read_schema(src).metadata or {})
    if metadata is not None:
        md[b"flopwatch"] = metadata
    pq.write_table(t.replace_schema_metadata(md), dst)
    return dst


def _detect_json(capsys: pytest.CaptureFixture[str], trace: Path) -> dict[str, Any]:
    assert main(["detect", str(trace), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


# ------------------------------------------------------------------ trace files read in pieces


def test_a_trace_whose_name_is_not_utf8_is_read(
    sim: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pyarrow refused a path with a non-UTF-8 byte and the trace was called "truncated or corrupt"."""
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/tr\xff.parquet"))
    shutil.copyfile(sim[0], odd)
    want = _detect_json(capsys, sim[0])
    got = _detect_json(capsys, odd)
    assert [s["net_energy_j"] for s in got["workloads"]] == [s["net_energy_j"] for s in want["workloads"]]
    assert len(want["workloads"]) == 1
    out = Path(os.fsdecode(bytes(tmp_path) + b"/j\xfe.jsonl"))
    assert main(["join", str(odd), str(sim[1]), "-o", str(out)]) == 0
    assert len(load_records(out)) == 1
    assert main(["idle", "-s", f"replay:{odd}", "--duration", "5", "--speed", "1000", "--json"]) == 0


def test_a_trace_replaced_while_it_is_read_is_never_mixed(sim: tuple[Path, Path], tmp_path: Path) -> None:
    """The footer, the metadata and every row group come from one descriptor: a trace renamed over the path
    between opening and reading (a recording finishing, an evader swapping files) is not half read."""
    path = tmp_path / "t.parquet"
    shutil.copyfile(sim[0], path)
    t = pq.read_table(sim[0])
    doubled = t.set_column(t.schema.get_field_index("power_w"), "power_w", pc_mul(t.column("power_w"), 2.0))
    other = _rewrite(sim[0], tmp_path / "other.parquet", table=doubled)
    src = open_source(path)
    os.replace(other, path)
    power = np.concatenate([c.cols["power_w"] for c in src.chunks(("power_w",))])
    assert np.array_equal(power, t.column("power_w").to_numpy(), equal_nan=True)
    assert len(src.frame()) == len(t)


def pc_mul(col: pa.ChunkedArray, k: float) -> pa.Array:
    return pa.array(col.to_numpy(zero_copy_only=False) * k)


def test_a_journal_replaced_between_passes_is_refused(sim: tuple[Path, Path], tmp_path: Path) -> None:
    import pyarrow.ipc as ipc

    t = pq.read_table(sim[0])
    j1, j2 = tmp_path / "a.parquet.journal", tmp_path / "b.parquet.journal"
    for j, tb in ((j1, t), (j2, t.slice(0, 10))):
        with pa.OSFile(str(j), "wb") as f, ipc.new_stream(f, tb.schema) as w:
            w.write_table(tb)
    src = open_source(j1)
    assert sum(len(c.t_s) for c in src.chunks(("power_w",))) == len(t)
    os.replace(j2, j1)
    with pytest.raises(InputError, match="replaced by another file"):
        list(src.chunks(("power_w",)))


# ------------------------------------------------------------------ a trace's metadata and columns


_BAD_METADATA = {
    "nested_100000_deep": (b"[" * 100_000 + b"]" * 100_000, "nested"),
    "devices_not_a_list": ({"devices": 5}, "flopwatch.devices"),
    "fingerprint_not_an_object": ({"fingerprint": "x"}, "flopwatch.fingerprint"),
    "t0_not_a_number": ({"t0_monotonic_s": "abc"}, "flopwatch.t0_monotonic_s"),
    "t0_nan": ({"t0_monotonic_s": float("nan")}, "flopwatch.t0_monotonic_s"),
    "simulated_string_false": ({"simulated": "false"}, "flopwatch.simulated"),
    "rate_negative": ({"rate_hz": -1}, "flopwatch.rate_hz"),
    "rate_5000_digits": (None, "flopwatch.rate_hz"),
    "source_not_a_string": ({"source": {"a": 1}}, "flopwatch.source"),
}


@pytest.mark.parametrize("case", sorted(_BAD_METADATA))
@pytest.mark.parametrize("command", ["detect", "join", "idle"])
def test_hostile_trace_metadata_is_one_line(
    sim: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, command: str
) -> None:
    """Tracebacks before: RecursionError (deep metadata), TypeError (devices 5), ValueError (fingerprint "x",
    t0 "abc" in join); and "simulated": "false" read as true by bool()."""
    edit, field = _BAD_METADATA[case]
    base = json.loads(pq.read_schema(sim[0]).metadata[b"flopwatch"])
    if case == "rate_5000_digits":
        raw = (
            json.dumps({k: v for k, v in base.items() if k != "rate_hz"})[:-1].encode()
            + b', "rate_hz": '
            + b"9" * 5000
            + b"}"
        )
    elif isinstance(edit, bytes):
        raw = edit
    else:
        raw = json.dumps({**base, **edit}).encode()
    bad = _rewrite(sim[0], tmp_path / f"{case}.parquet", metadata=raw)
    args = {
        "detect": ["detect", str(bad)],
        "join": ["join", str(bad), str(sim[1]), "-o", str(tmp_path / "j.jsonl")],
        "idle": ["idle", "-s", f"replay:{bad}", "--duration", "3", "--speed", "1000"],
    }[command]
    _one_line_exit_2(capsys, args, str(bad), field)
    assert not (tmp_path / "j.jsonl").exists()


def test_a_column_twice_is_one_line(
    sim: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """KeyError traceback before ("Field power_w exists 2 times")."""
    t = pq.read_table(sim[0])
    dup = pa.table([*t.columns, t.column("power_w")], names=[*t.column_names, "power_w"])
    bad = _rewrite(sim[0], tmp_path / "dup.parquet", table=dup.replace_schema_metadata(t.schema.metadata))
    _one_line_exit_2(capsys, ["detect", str(bad)], str(bad), "'power_w'", "more than once")


def test_an_empty_trace_is_named_by_its_own_path(
    sim: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The error named the metadata's "source" (the schedule the simulator played), not the file given."""
    empty = _rewrite(sim[0], tmp_path / "empty.parquet", table=pq.read_table(sim[0]).slice(0, 0))
    line = _one_line_exit_2(capsys, ["detect", str(empty)], str(empty), "no samples")
    assert "s.json" not in line


# ------------------------------------------------------------------ ambiguous JSON


def test_a_key_twice_in_a_record_or_profile_is_refused(
    sim: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Python keeps the last of two equal keys, other readers the first: a file could show a reviewer one
    FLOP count and flopwatch another. Both are refused, naming the key."""
    first = sim[1].read_text().splitlines()[0]
    twice = first[:-1] + ', "total_flops": 1.0}'
    (tmp_path / "r.jsonl").write_text(twice + "\n")
    with pytest.raises(InputError, match="'total_flops' appears twice"):
        load_records(tmp_path / "r.jsonl")
    (tmp_path / "p.json").write_text('{"model": "eq1", "model": "eq2"}')
    _one_line_exit_2(
        capsys, ["estimate", str(sim[1]), "-p", str(tmp_path / "p.json")], "p.json", "'model' appears twice"
    )


# ------------------------------------------------------------------ options naming hardware or a power


@pytest.mark.parametrize("device", ["nonexistent", "", "h1000"])
def test_an_unknown_device_option_is_refused(
    sim: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], device: str
) -> None:
    """`estimate --device h1000` silently used the record's device instead: the bounds a verdict rests on came
    from hardware the user did not name."""
    for args in (
        ["estimate", str(sim[1]), "-p", str(tmp_path / "none.json"), "--device", device],
        ["calibrate", str(sim[1]), "-o", str(tmp_path / "p.json"), "--device", device],
    ):
        _one_line_exit_2(capsys, args, "'--device'", "unknown device")
    assert not (tmp_path / "p.json").exists()


def test_known_device_spellings_still_pass() -> None:
    from flopwatch.devices import resolve

    for name in ("h100", " H100 ", "sim:a100", "NVIDIA A100-SXM4-80GB", "orin-nano"):
        assert resolve(name) is not None, name


@pytest.mark.parametrize("command", ["detect", "join"])
def test_an_idle_power_above_the_device_maximum_is_refused(
    sim: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """`--idle-power 5000` (milliwatts meant, or a node's total) made every workload's net energy negative,
    with exit 0."""
    args = ["detect", str(sim[0])] if command == "detect" else ["join", str(sim[0]), str(sim[1])]
    if command == "join":
        args += ["-o", str(tmp_path / "j.jsonl")]
    _one_line_exit_2(capsys, [*args, "--idle-power", "5000"], "'--idle-power'", "400 W")
    assert main([*args, "--idle-power", "60"]) == 0


# ------------------------------------------------------------------ JSON Lines and self-contradicting records

_REC = {"label": "a", "net_energy_j": 5e4, "duration_s": 100.0, "mean_util": 0.9, "total_flops": 1e15}


def _records(tmp_path: Path, *recs: dict[str, Any], ensure_ascii: bool = True) -> Path:
    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r, ensure_ascii=ensure_ascii) + "\n" for r in recs), encoding="utf-8")
    return p


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85"])
def test_a_raw_unicode_line_separator_inside_a_string_is_valid_jsonl(tmp_path: Path, char: str) -> None:
    """str.splitlines() cut the line there and the record was refused as "Unterminated string"."""
    rs = load_records(_records(tmp_path, {**_REC, "label": f"a{char}b"}, ensure_ascii=False))
    assert [r.label for r in rs] == [f"a{char}b"]


def test_crlf_and_lone_cr_lines_still_split(tmp_path: Path) -> None:
    two = [json.dumps(_REC), json.dumps({**_REC, "label": "b"})]
    for sep in ("\r\n", "\r", "\n"):
        (tmp_path / "r.jsonl").write_text(sep.join(two) + sep, newline="")
        assert [r.label for r in load_records(tmp_path / "r.jsonl")] == ["a", "b"]


def test_a_record_naming_the_simulator_stays_simulated(tmp_path: Path) -> None:
    """ "simulated": false on a record of device sim:a100 passed it off as measured."""
    for extra in ({"device": "sim:a100"}, {"device_name": "NVIDIA A100-SXM4-80GB (simulated)"}):
        (r,) = load_records(_records(tmp_path, {**_REC, **extra, "simulated": False}))
        assert r.simulated
    (r,) = load_records(_records(tmp_path, {**_REC, "device": "cuda:0", "simulated": False}))
    assert not r.simulated


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"device": ["a"]}, "device"),
        ({"device_name": {"a": 1}}, "device_name"),
        ({"start_monotonic_s": 20.0, "end_monotonic_s": 10.0}, "end_monotonic_s"),
        ({"start_wall": 1.8e9, "end_wall": 1.7e9}, "end_wall"),
    ],
)
def test_a_record_contradicting_itself_is_refused(tmp_path: Path, extra: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as e:
        load_records(_records(tmp_path, {**_REC, **extra}))
    assert e.value.field == field and e.value.record == "a"


# ------------------------------------------------------------------ schedule items with keys nobody reads


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"sweep": "datacenter", "label": "gpt_d768_b16_s1024_L12_v32768_bf16", "steps": 5, "precision": "fp32"},
         "precision"),
        ({**_JOB, "mfu": 0.5}, "mfu"),
        ({"idle_s": 10, "sweep": "datacenter"}, "sweep"),
        ({"arch": "gpt", "d_model": 64, "steps": 3}, "d_model"),
    ],
)  # fmt: skip
def test_a_schedule_item_with_an_unknown_key_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], item: dict[str, Any], field: str
) -> None:
    """The key was silently dropped: `precision = "fp32"` beside a bf16 sweep label played a bf16 run."""
    (tmp_path / "s.json").write_text(json.dumps([{"idle_s": 5}, item]))
    args = ["sim", "trace", "a100", "--schedule", str(tmp_path / "s.json"), "-o", str(tmp_path / "t.parquet")]
    _one_line_exit_2(capsys, args, "s.json", "record 1" if "idle_s" not in item else "record 1", f"'{field}'")
    assert not (tmp_path / "t.parquet").exists()


def test_a_toml_schedule_table_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.toml").write_text("[schedule]\nidle_s = 10\n")
    args = ["sim", "trace", "a100", "--schedule", str(tmp_path / "s.toml"), "-o", str(tmp_path / "t.parquet")]
    _one_line_exit_2(capsys, args, "s.toml", "[[schedule]]")


# ------------------------------------------------------------------ unit slips inside a trace


def _scaled(src: Path, dst: Path, column: str, k: float) -> Path:
    t = pq.read_table(src)
    i = t.schema.get_field_index(column)
    return _rewrite(src, dst, table=t.set_column(i, column, pc_mul(t.column(column), k)))


def test_an_energy_counter_in_millijoules_is_flagged(
    sim: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NVML counts energy in mJ: a counter written as J without conversion made every workload ×1000
    (11 MJ over 36 s on one A100), exit 0, no warning."""
    bad = _scaled(sim[0], tmp_path / "mj.parquet", "energy_j", 1000.0)
    got = _detect_json(capsys, bad)
    assert got["workloads"] and all(
        any("counter and power disagree" in w for w in s["warnings"]) for s in got["workloads"]
    )
    honest = _detect_json(capsys, sim[0])
    assert not any("disagree" in w for s in honest["workloads"] for w in s["warnings"])


@pytest.mark.parametrize("k", [1000.0, 0.001])
def test_a_time_column_in_other_units_is_refused(
    sim: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], k: float
) -> None:
    """t_s in milliseconds: every duration ×1000 and every net energy hugely negative, exit 0 (its intervals
    were too long for the consistency checks to look at)."""
    bad = _scaled(sim[0], tmp_path / "ms.parquet", "t_s", k)
    _one_line_exit_2(capsys, ["detect", str(bad)], "ms.parquet", "'t_s'", "is t_s in seconds?")
    args = ["join", str(bad), str(sim[1]), "-o", str(tmp_path / "j.jsonl")]
    _one_line_exit_2(capsys, args, "'t_s'")


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Five simulated runs joined with their trace, and a profile calibrated on them (SIMULATED)."""
    d = tmp_path_factory.mktemp("study")
    items: list[dict[str, Any]] = [{"idle_s": 30}]
    for i, steps in enumerate((200, 300, 400, 250, 350)):
        items += [{**_JOB, "label": f"job{i}", "steps": steps}, {"idle_s": 15}]
    (d / "s.json").write_text(json.dumps(items))
    args = ["sim", "trace", "a100", "--schedule", str(d / "s.json"), "-o", str(d / "t.parquet")]
    assert main([*args, "--records", str(d / "r.jsonl"), "--rate", "4", "--seed", "5"]) == 0
    assert main(["join", str(d / "t.parquet"), str(d / "r.jsonl"), "-o", str(d / "j.jsonl")]) == 0
    assert main(["calibrate", str(d / "j.jsonl"), "-o", str(d / "p.json"), "--precision", "all"]) == 0
    return d / "j.jsonl", d / "p.json"


@pytest.mark.parametrize("divisor", [3600.0, 1000.0])
def test_record_energy_in_wh_or_kj_is_never_below(
    study: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], divisor: float
) -> None:
    """Energy written in Wh (or kJ) after the join: an A100 at 99 % utilisation drawing 0.07 W of net power, and
    `estimate --threshold` said "below" a threshold the run's true FLOPs exceed. The record now carries the
    join's "utilisation without power" warning, which blocks "below"."""
    joined, prof = study
    rs = load_records(joined)
    r = rs[0]
    edited = {
        **r.to_dict(),
        "net_energy_j": r.net_energy_j / divisor,
        "energy_j": (r.energy_j or 0) / divisor,
    }
    bad = tmp_path / "edited.jsonl"
    bad.write_text(json.dumps(edited) + "\n")
    (e,) = load_records(bad)
    assert any("utilisation without power" in w for w in e.extra["telemetry_warnings"])
    capsys.readouterr()
    assert (
        main(["estimate", str(bad), "-p", str(prof), "--threshold", f"{r.total_flops * 0.9:g}", "--json"])
        == 0
    )
    (row,) = json.loads(capsys.readouterr().out)["records"]
    assert row["threshold_verdict"] != "below"
    assert any("utilisation without power" in w for w in row["warnings"])


def test_an_honest_record_carries_no_such_warning(study: tuple[Path, Path]) -> None:
    assert all(not r.extra.get("telemetry_warnings") for r in load_records(study[0]))


def test_the_record_warning_survives_a_round_trip_once(study: tuple[Path, Path], tmp_path: Path) -> None:
    from flopwatch.records import append_record

    r = load_records(study[0])[0]
    p = tmp_path / "a.jsonl"
    p.write_text(json.dumps({**r.to_dict(), "net_energy_j": r.net_energy_j / 3600}) + "\n")
    for i in range(3):  # read, write back, read again: the warning is not duplicated
        (rec,) = load_records(p)
        q = tmp_path / f"b{i}.jsonl"
        append_record(q, rec)
        p = q
    (rec,) = load_records(p)
    assert sum("utilisation without power" in w for w in rec.extra["telemetry_warnings"]) == 1


def test_a_malformed_peak_override_is_an_error_in_the_resolver_not_an_unknown_device(monkeypatch):
    """Library and daemon callers of devices.resolve: a malformed $FLOPWATCH_PEAK_FLOPS used to be swallowed,
    the device then "unknown" and its datasheet bounds dropped."""
    from flopwatch.devices import resolve
    from flopwatch.errors import InputError

    monkeypatch.setenv("FLOPWATCH_PEAK_FLOPS", "h100:bf16=lots")
    with pytest.raises(InputError):
        resolve("NVIDIA H100 80GB HBM3")
    monkeypatch.delenv("FLOPWATCH_PEAK_FLOPS")
    assert resolve("no such gpu", "h100").key == "h100"


def test_a_relative_state_directory_never_puts_the_ledger_in_the_current_directory(monkeypatch):
    from flopwatch.monitor.config import default_ledger_path

    monkeypatch.setenv("STATE_DIRECTORY", "state")
    monkeypatch.setenv("XDG_STATE_HOME", "xdg")
    assert default_ledger_path().is_absolute()
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/flopwatch")
    assert str(default_ledger_path()) == "/var/lib/flopwatch/ledger.db"
