"""Hostile use of the commands added or rewritten for issues 10–15, through the real CLI.

Every bad input must give exactly one stderr line ``flopwatch: error: …`` (naming file, record or field), exit
status 2, no traceback and no hang; and nothing already recorded (the ledger, its key, the trace, the records,
the schedule) may change. A FIFO input runs in a subprocess with a timeout. The only network traffic is to a
closed port on 127.0.0.1. The second half drives the window verdict with ledgers an evader could produce
(legacy rows, non-positive estimates, clocks set back or forward, duplicated rows): none may say "below".

Everything simulated here is labelled so by the tools (``sim:`` sensors, ``sim trace``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flopwatch.cli import main

SCHEDULE = """
[[schedule]]
idle_s = 20
[[schedule]]
label = "big[/bold]\\u001b[31mX"
flops_per_step = 2.6e13
bytes_per_step = 8e10
tokens_per_step = 1408
batch_size = 128
dtype = "bf16"
num_layers = 36
duration_s = 30
[[schedule]]
idle_s = 20
"""

#: closed port on loopback: connection refused at once (never any other address)
PROM = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace (its name holds '#', '?', '%41', a space and a non-ASCII letter): a SIMULATED trace with its
    ground-truth records, a monitor ledger with key and pin, and hostile files."""
    d = tmp_path_factory.mktemp("qa") / "we ird#?%41 ü"
    d.mkdir()
    (d / "s.toml").write_text(SCHEDULE)
    argv = ["sim", "trace", "h100", "--schedule", str(d / "s.toml"), "-o", str(d / "t.parquet")]
    assert main([*argv, "--records", str(d / "r.jsonl"), "--rate", "2"]) == 0
    led = str(d / "led.db")
    mon = ["monitor", "-s", "sim:h100", "--schedule", str(d / "s.toml"), "--duration", "80", "--ledger", led]
    assert main([*mon, "--threshold-flops", "1e15"]) == 0
    assert main(["ledger", "export-key", led, "-o", str(d / "pin.pub")]) == 0
    (d / "empty").write_bytes(b"")
    (d / "garbage").write_text("garbage{{\n")
    (d / "deep.json").write_text("[" * 100_000)
    (d / "obj.json").write_text('{"a": 1}\n')
    (d / "badsched.json").write_text('[{"bogus": 1}]')
    (d / "binsched.toml").write_bytes((d / "t.parquet").read_bytes()[:4096])
    (d / "adir").mkdir()
    os.mkfifo(d / "fifo")
    os.symlink(d / "led.db.key", d / "keylink")
    return d


PRECIOUS = ("led.db", "led.db.key", "led.db.pub", "pin.pub", "t.parquet", "r.jsonl", "s.toml")


def _digests(d: Path) -> dict[str, str]:
    return {n: hashlib.sha256((d / n).read_bytes()).hexdigest() for n in PRECIOUS}


# Each case: argv with "{d}" for the workspace, and a fragment the error line must contain (or None).
BAD: list[tuple[list[str], str | None]] = [
    # ---- verdict
    (["verdict", "{d}/missing.db", "--threshold", "1e15"], "missing.db"),
    (["verdict", "{d}/adir", "--threshold", "1e15"], "adir"),
    (["verdict", "{d}/empty", "--threshold", "1e15"], "empty"),
    (["verdict", "{d}/garbage", "--threshold", "1e15"], "garbage"),
    (["verdict", "{d}/r.jsonl", "--threshold", "1e15"], "r.jsonl"),
    *[(["verdict", "{d}/led.db", "--threshold", t], "--threshold") for t in ("nan", "inf", "-1", "0", "abc", "1e400")],
    *[
        (["verdict", "{d}/led.db", "--threshold", "1e15", "--window", w], "--window")
        for w in ("garbage", "0h", "-5h", "nanh", "infh", "1e400s", "")
    ],
    (["verdict", "{d}/led.db", "--threshold", "1e15", "--by", "foo"], "--by"),
    (["verdict", "{d}/led.db", "--threshold", "1e15", "--device", "nosuch"], "--device"),
    *[
        (["verdict", "{d}/led.db", "--threshold", "1e15", "--profile", f"{{d}}/{p}"], p)
        for p in ("missing.json", "garbage", "deep.json", "adir", "r.jsonl", "empty")
    ],
    # ---- join
    (["join", "{d}/missing.parquet", "{d}/r.jsonl", "-o", "{d}/o.jsonl"], "missing.parquet"),
    (["join", "{d}/t.parquet", "{d}/missing.jsonl", "-o", "{d}/o.jsonl"], "missing.jsonl"),
    (["join", "{d}/adir", "{d}/r.jsonl", "-o", "{d}/o.jsonl"], "adir"),
    (["join", "{d}/t.parquet", "{d}/adir", "-o", "{d}/o.jsonl"], "adir"),
    (["join", "{d}/empty", "{d}/r.jsonl", "-o", "{d}/o.jsonl"], "empty"),
    (["join", "{d}/garbage", "{d}/r.jsonl", "-o", "{d}/o.jsonl"], "garbage"),
    (["join", "{d}/t.parquet", "{d}/garbage", "-o", "{d}/o.jsonl"], "garbage"),
    (["join", "{d}/t.parquet", "{d}/empty", "-o", "{d}/o.jsonl"], "empty"),
    (["join", "{d}/t.parquet", "{d}/deep.json", "-o", "{d}/o.jsonl"], "deep.json"),
    (["join", "{d}/t.parquet", "{d}/obj.json", "-o", "{d}/o.jsonl"], "obj.json"),
    (["join", "{d}/t.parquet", "{d}/r.jsonl", "-o", "{d}/r.jsonl"], "r.jsonl"),
    (["join", "{d}/t.parquet", "{d}/r.jsonl", "-o", "{d}/r.jsonl", "--force"], "r.jsonl"),
    (["join", "{d}/t.parquet", "{d}/r.jsonl", "-o", "{d}/t.parquet", "--force"], "t.parquet"),
    (["join", "{d}/t.parquet", "{d}/r.jsonl", "-o", "{d}/led.db", "--force"], "led.db"),
    (["join", "{d}/t.parquet", "{d}/r.jsonl", "-o", "{d}/led.db.key", "--force"], "led.db.key"),
    (["join", "{d}/t.parquet", "{d}/r.jsonl", "-o", "{d}/adir"], "adir"),
    (["join", "{d}/t.parquet", "{d}/r.jsonl", "-o", "{d}/nodir/sub/o.jsonl"], "nodir"),
    (["join", "{d}/t.parquet", "{d}/r.jsonl", "-o", "{d}/o.jsonl", "--clock", "bogus"], "clock"),
    *[
        (["join", "{d}/t.parquet", "{d}/r.jsonl", "-o", "{d}/o.jsonl", "--idle-power", v], "idle")
        for v in ("nan", "-1", "inf", "1e400")
    ],
    (["join", "{d}/t.parquet", "{d}/r.jsonl", "-o", "{d}/o.jsonl", "--device", "nosuch"], "device"),
    # ---- detect
    *[(["detect", "{d}/t.parquet", "--idle-power", v], "idle") for v in ("-1", "nan", "inf")],
    *[(["detect", "{d}/t.parquet", "--poll", v], "poll") for v in ("0", "nan", "-1")],
    *[(["detect", "{d}/t.parquet", "--util-threshold", v], "util") for v in ("nan", "2", "-0.1")],
    (["detect", "{d}/t.parquet", "--start-polls", "0"], "polls"),
    (["detect", "{d}/t.parquet", "--end-polls", "-3"], "polls"),
    (["detect", "{d}/t.parquet", "--edges", "foo"], "edges"),
    (["detect", "{d}/t.parquet", "--device", "nosuch"], "device"),
    *[(["detect", f"{{d}}/{f}"], f) for f in ("deep.json", "adir", "empty", "garbage", "led.db")],
    # ---- record (replay, --speed)
    *[
        (["record", "-s", "replay:{d}/t.parquet", "--duration", "5", "-o", "{d}/rec.parquet", "--speed", v], "speed")
        for v in ("nan", "0", "-2", "1e400")
    ],
    *[
        (["record", "-s", "replay:{d}/t.parquet", "--duration", v, "-o", "{d}/rec.parquet"], "duration")
        for v in ("nan", "-5", "0")
    ],
    (["record", "-s", "replay:{d}/t.parquet", "--duration", "5", "-o", "{d}/rec.parquet", "--rate", "0"], "rate"),
    *[
        (["record", "-s", "replay:{d}/t.parquet", "--duration", "5", "-o", "{d}/rec.parquet", "--flush-every", v],
         "flush")
        for v in ("nan", "0", "-1")
    ],  # fmt: skip
    *[
        (["record", "-s", "replay:{d}/t.parquet", "--duration", "5", "-o", f"{{d}}/{o}", "--force", "--speed", "100"],
         o)
        for o in ("t.parquet", "led.db", "led.db.key", "keylink")
    ],  # fmt: skip
    *[
        (["record", "-s", f"replay:{{d}}/{f}", "--duration", "5", "-o", "{d}/rec.parquet", "--speed", "100"], f)
        for f in ("missing", "adir", "garbage", "empty")
    ],
    (["record", "-s", "bogus:0", "--duration", "5", "-o", "{d}/rec.parquet"], "sensor"),
    # ---- idle
    *[(["idle", "-s", "sim:orin-nano", "--duration", v], "duration") for v in ("nan", "-1", "0", "inf", "1e300")],
    *[(["idle", "-s", "sim:orin-nano", "--duration", "5", "--rate", v], "rate") for v in ("nan", "0", "1e9")],
    *[(["idle", "-s", "sim:orin-nano", "--duration", "5", "--speed", v], "speed") for v in ("nan", "-1")],
    *[
        (["idle", "-s", "sim:orin-nano", "--duration", "5", "--profile", f"{{d}}/{p}"], p)
        for p in ("missing.json", "deep.json", "garbage", "adir", "r.jsonl")
    ],
    (["idle", "-s", "replay:{d}/garbage", "--duration", "5"], "garbage"),
    (["idle", "-s", "bogus", "--duration", "5"], "sensor"),
    # ---- ledger
    (["ledger", "verify", "{d}/missing.db"], "missing.db"),
    *[(["ledger", "verify", "{d}/led.db", "--public-key", f"{{d}}/{k}"], k) for k in ("missing.pub", "garbage", "adir", "deep.json")],
    *[(["ledger", "verify", "{d}/led.db", "--expect-head", h], "expect_head") for h in ("garbage", "-1", "3:zz", "9" * 26)],
    *[(["ledger", "show", f"{{d}}/{f}"], f) for f in ("missing.db", "garbage", "adir")],
    *[(["ledger", "export-key", "{d}/led.db", "-o", f"{{d}}/{o}"], o) for o in ("led.db", "led.db.key", "keylink", "adir")],
    (["ledger", "export-key", "{d}/garbage"], "garbage"),
    # ---- fleet (loopback, closed port)
    *[
        (["fleet", "estimate", "--prometheus", PROM, "--start", s, "--end", e, "--retries", "0", "--timeout", "2"], f)
        for s, e, f in (
            ("0", "3600", "prometheus"),
            ("garbage", "3600", "start"),
            ("3600", "0", "end"),
            ("nan", "3600", "start"),
            ("-inf", "inf", "start"),
            ("1e400", "3600", "start"),
            ("2026-13-45T99:00:00Z", "3600", "start"),
            ("2026-11-30 00:00", "3600", "start"),
        )
    ],
    *[
        (["fleet", "estimate", "--prometheus", PROM, "--start", "0", "--end", "3600", opt, v], field)
        for opt, v, field in (
            ("--step", "0s", "step"),
            ("--step", "garbage", "step"),
            ("--step", "-15s", "step"),
            ("--window", "nan", "window"),
            ("--window", "0s", "window"),
            ("--time-chunk", "0s", "chunk"),
            ("--gpus-per-chunk", "0", "gpus"),
            ("--gpus-per-chunk", "-1", "gpus"),
            ("--timeout", "nan", "timeout"),
            ("--timeout", "-1", "timeout"),
            ("--timeout", "inf", "timeout"),
            ("--retries", "-1", "retries"),
            ("--retries", "99999999999", "retries"),
            ("--threshold", "nan", "threshold"),
            ("--threshold", "-5", "threshold"),
            ("--selector", "{{{", "selector"),
            ("--dtype", "fp99", "dtype"),
            ("--profile", "{d}/deep.json", "deep.json"),
        )
    ],
    (["fleet", "estimate", "--prometheus", "file:///etc/passwd", "--start", "0", "--end", "3600"], "prometheus"),
    # ---- sim openmetrics
    *[
        (["sim", "openmetrics", "-o", "{d}/a.om", opt, v], field)
        for opt, v, field in (
            ("--gpus", "0", "gpus"),
            ("--gpus", "-1", "gpus"),
            ("--gpus", "99999999999", "gpus"),
            ("--hours", "nan", "hours"),
            ("--hours", "inf", "hours"),
            ("--hours", "-1", "hours"),
            ("--hours", "1e9", "hours"),
            ("--interval", "0s", "interval"),
            ("--interval", "garbage", "interval"),
            ("--gpus-per-node", "0", "gpus"),
            ("--gpus-per-node", "-3", "gpus"),
            ("--label-style", "foo", "label"),
            ("--resets", "-1", "resets"),
            ("--resets", "99999999", "resets"),
            ("--drop", "nan", "drop"),
            ("--drop", "1.5", "drop"),
            ("--drop", "-0.1", "drop"),
            ("--start", "garbage", "start"),
            ("--start", "nan", "start"),
            ("--seed", "-1", "seed"),
            ("--device", "nosuch", "device"),
            ("--omit", "nosuch", "omit"),
            ("--schedule", "{d}/missing.json", "missing.json"),
            ("--schedule", "{d}/badsched.json", "badsched.json"),
            ("--schedule", "{d}/deep.json", "deep.json"),
            ("--schedule", "{d}/adir", "adir"),
            ("--schedule", "{d}/binsched.toml", "binsched.toml"),
        )
    ],
    (["sim", "openmetrics", "-o", "{d}/a.om", "--interval", "1ms", "--hours", "1000"], "hours"),
    (["sim", "openmetrics", "-o", "{d}/b.om", "--hours", "0.01", "--truth", "{d}/b.om", "--force"], "b.om"),
    (["sim", "openmetrics", "-o", "{d}/led.db", "--hours", "0.01", "--force"], "led.db"),
    (["sim", "openmetrics", "-o", "{d}/k.om", "--hours", "0.01", "--truth", "{d}/led.db.key", "--force"], "led.db.key"),
    (["sim", "openmetrics", "-o", "{d}/adir", "--hours", "0.01"], "adir"),
    # ---- sim trace
    *[
        (["sim", "trace", "h100", "--schedule", f"{{d}}/{s}", "-o", "{d}/t1.parquet"], s)
        for s in ("badsched.json", "deep.json", "binsched.toml", "missing.json", "adir")
    ],
    (["sim", "trace", "h100", "--schedule", "{d}/s.toml", "-o", "{d}/s.toml", "--force"], "s.toml"),
    (["sim", "trace", "h100", "--schedule", "{d}/s.toml", "-o", "{d}/led.db", "--force"], "led.db"),
    (["sim", "trace", "h100", "--schedule", "{d}/s.toml", "-o", "{d}/t2.parquet", "--records", "{d}/s.toml"], "s.toml"),
    (["sim", "trace", "h100", "--schedule", "{d}/s.toml", "-o", "{d}/t2.parquet", "--records", "{d}/led.db"], "led.db"),
    *[
        (["sim", "trace", "h100", "--schedule", "{d}/s.toml", "-o", "{d}/t2.parquet", opt, v], field)
        for opt, v, field in (
            ("--rate", "nan", "rate"),
            ("--rate", "1e9", "rate"),
            ("--power-cap-w", "-1", "power_cap"),
            ("--power-cap-w", "nan", "power_cap"),
            ("--locked-clock-mhz", "0", "locked_clock"),
            ("--tail-s", "-1", "tail"),
            ("--tail-s", "nan", "tail"),
        )
    ],
    (["sim", "trace", "nosuch", "--schedule", "{d}/s.toml", "-o", "{d}/t2.parquet"], "device"),
]  # fmt: skip

GOOD: list[list[str]] = [
    ["verdict", "{d}/led.db", "--threshold", "1e15", "--device", "h100"],
    ["verdict", "{d}/led.db", "--threshold", "1e15", "--by", "job", "--window", "24h"],
    ["verdict", "{d}/led.db", "--threshold", "1e15", "--by", "device", "--window", "90m", "--json"],
    ["join", "{d}/t.parquet", "{d}/r.jsonl", "-o", "{d}/out #?%41 ü.jsonl", "--json"],
    ["detect", "{d}/t.parquet", "--json"],
    [
        "record",
        "-s",
        "replay:{d}/t.parquet",
        "--duration",
        "5",
        "-o",
        "{d}/new dir/r.parquet",
        "--speed",
        "100",
    ],
    ["idle", "-s", "sim:orin-nano", "--duration", "5", "--json"],
    ["idle", "-s", "replay:{d}/t.parquet", "--duration", "5", "--speed", "100", "--strict"],
    ["ledger", "verify", "{d}/led.db", "--public-key", "{d}/pin.pub"],
    ["ledger", "show", "{d}/led.db"],
    ["ledger", "export-key", "{d}/led.db", "-o", "{d}/pin 2 #?%41 ü.pub"],
    ["fleet", "metrics", "--json"],
    ["sim", "openmetrics", "-o", "{d}/o #?%41 ü.om", "--hours", "0.01", "--gpus", "2"],
    ["sim", "openmetrics", "-o", "{d}/new dir/a/b.om", "--hours", "0.01", "--gpus", "2"],
    ["sim", "trace", "h100", "--schedule", "{d}/s.toml", "-o", "{d}/t4.parquet", "--records", "{d}/r4.jsonl"],
]


def _argv(template: list[str], d: Path) -> list[str]:
    return [a.replace("{d}", str(d)) for a in template]


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("flopwatch: error:"), lines
    return lines[0]


@pytest.mark.parametrize("template, names", BAD, ids=[" ".join(c[0])[:90] for c in BAD])
def test_bad_input_is_one_line_exit_2_and_loses_nothing(ws, capsys, template, names):  # noqa: ANN001
    before = _digests(ws)
    capsys.readouterr()
    code = main(_argv(template, ws))
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2, line
    if names:
        assert names.lower().replace("_", "-") in line.lower().replace("_", "-"), line
    assert _digests(ws) == before
    assert not list(ws.glob("*.tmp")), "a refused write left a temporary file"


@pytest.mark.parametrize("template", GOOD, ids=[" ".join(c)[:90] for c in GOOD])
def test_good_input_in_odd_paths_works_and_loses_nothing(ws, capsys, template):  # noqa: ANN001
    before = _digests(ws)
    assert main(_argv(template, ws)) == 0, capsys.readouterr().err
    assert "Traceback" not in capsys.readouterr().err
    assert _digests(ws) == before


FIFO: list[list[str]] = [
    ["verdict", "{d}/fifo", "--threshold", "1e15"],
    ["verdict", "{d}/led.db", "--threshold", "1e15", "--profile", "{d}/fifo"],
    ["join", "{d}/fifo", "{d}/r.jsonl", "-o", "{d}/of.jsonl"],
    ["join", "{d}/t.parquet", "{d}/fifo", "-o", "{d}/of.jsonl"],
    ["detect", "{d}/fifo"],
    ["record", "-s", "replay:{d}/fifo", "--duration", "5", "-o", "{d}/rf.parquet"],
    ["idle", "-s", "replay:{d}/fifo", "--duration", "5"],
    ["ledger", "verify", "{d}/led.db", "--public-key", "{d}/fifo"],
    ["ledger", "show", "{d}/fifo"],
    ["ledger", "export-key", "{d}/fifo"],
    ["sim", "openmetrics", "-o", "{d}/f.om", "--schedule", "{d}/fifo"],
    ["sim", "trace", "h100", "--schedule", "{d}/fifo", "-o", "{d}/tf.parquet"],
    ["fleet", "estimate", "--prometheus", PROM, "--start", "0", "--end", "3600", "--profile", "{d}/fifo"],
]


@pytest.mark.parametrize("template", FIFO, ids=[" ".join(c)[:90] for c in FIFO])
def test_a_fifo_input_is_refused_without_hanging(ws, template):  # noqa: ANN001
    before = _digests(ws)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    p = subprocess.run(
        [sys.executable, "-m", "flopwatch", *_argv(template, ws)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    _one_error_line(p.stderr)
    assert p.returncode == 2
    assert _digests(ws) == before


def test_ledger_verify_of_a_non_ledger_is_an_input_error(ws, capsys):  # noqa: ANN001
    """A ledger path that holds something else is a bad input (exit 2, one line naming the file; issue 23),
    not tampering and not a crash."""
    for f in ("garbage", "empty", "adir", "t.parquet"):
        assert main(["ledger", "verify", str(ws / f)]) == 2
        out = capsys.readouterr()
        lines = out.err.strip().splitlines()
        assert len(lines) == 1 and str(ws / f) in lines[0] and "Traceback" not in out.err


# ------------------------------------------------------------------------------- window verdict evasions
from window_cases import _BIG, EVASIONS, T, _cp, _row  # noqa: E402  (shared with the live-window parity test)


@pytest.mark.parametrize("name, entries, window", EVASIONS, ids=[e[0] for e in EVASIONS])
@pytest.mark.parametrize("by", ["all", "device", "job"])
def test_no_evasive_ledger_yields_below(name, entries, window, by):  # noqa: ANN001
    from flopwatch.evaluate.window import ledger_window_verdicts

    res = ledger_window_verdicts(entries, threshold_flops=T, window_s=window, by=by, device="h100")
    assert res["total"]["verdict"] != "below", (name, res["total"]["warnings"])
    if by == "device":  # one device: its group holds every row (per job, an honest job alone may be below)
        for g in res["groups"]:
            assert g["verdict"] != "below", (name, g)


def test_duplicated_rows_count_once():
    from flopwatch.evaluate.window import ledger_window_verdicts

    row = _row("a", 0, 10, est=6e14, lower_flops=5.5e14, upper_flops=6.5e14)
    res = ledger_window_verdicts([row, row, _cp(20, 0)], threshold_flops=T, window_s=None, device="h100")
    assert res["total"]["n_workloads"] == 1 and res["total"]["lower_flops"] == pytest.approx(5.5e14)
    assert res["total"]["verdict"] != "above"  # the copy does not double the lower bound


def test_a_device_renamed_between_chunks_still_counts_whole():
    from flopwatch.evaluate.window import ledger_window_verdicts

    ents = [
        _row("a", 0, 10, est=6e14, lower_flops=5.5e14, upper_flops=6.5e14, device="x"),
        _row("b", 20, 30, est=6e14, lower_flops=5.5e14, upper_flops=6.5e14, device="y"),
        _cp(40, 0, "y"),
    ]
    res = ledger_window_verdicts(ents, threshold_flops=T, window_s=None, by="device", device="h100")
    assert res["total"]["verdict"] == "above"


def test_honest_ledgers_are_still_decided():
    from flopwatch.evaluate.window import ledger_window_verdicts

    ents = [_row("a", 0, 10), *[_cp(20.0 + 60 * i, 0.0) for i in range(5)]]
    # 1e25: a threshold the 250 s of NVML's blind 75 % outside the row allow (round 12, `outside-blind`)
    assert (
        ledger_window_verdicts(ents, threshold_flops=1e25, window_s=None, device="h100")["total"]["verdict"]
        == "below"
    )
    big = [_BIG, *[_cp(2100.0 + 60 * i, 0.0) for i in range(5)]]
    res = ledger_window_verdicts(big, threshold_flops=T, window_s=86400.0, device="h100")
    assert res["total"]["verdict"] == "above"
