"""Property-based tests (hypothesis): every loader either returns valid data or raises InputError.

Generated inputs mix well-formed files with hostile values in every field (NaN, ±inf, 1e999, integers of
hundreds or thousands of digits, 1e-300, negatives, wrong types, deep nesting, truncation, random bytes).
Properties checked:

* no exception other than :class:`~flopwatch.errors.InputError` (and subclasses) escapes a loader;
* whatever a loader accepts is valid downstream: finite numbers in their physical ranges, and calibration /
  estimation on accepted data raise nothing but flopwatch errors.

Runs are derandomized (fixed seeds, no example database) so CI is deterministic. The example counts are in
``tests/hypothesis_budget.py``: a small share by default, the full volume (well over 10 000 with the CLI's)
under ``FLOPWATCH_HYPOTHESIS=full``, which ``.ci/run`` runs.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flopwatch.errors import FlopwatchError, InputError
from flopwatch.io import parse_json, parse_toml
from hypothesis_budget import FULL_EXAMPLES, HOSTILE_INPUT, examples

sys.path.insert(0, str(Path(__file__).parent / "hostile"))
import make_corpus  # noqa: E402  (the corpus generator's good records and profile)


def test_example_budget() -> None:
    """The full volume (FLOPWATCH_HYPOTHESIS=full, run by .ci/run) keeps over 10 000 hostile-input cases."""
    assert sum(FULL_EXAMPLES[k] for k in HOSTILE_INPUT) >= 10_000


# ------------------------------------------------------------------------------------------- strategies

BIG_INTS = ["1" + "0" * 400, "9" * 5000, "-" + "9" * 320]
HOSTILE_LITERALS = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "-1e999",
    "1e-300",
    "5e-324",
    "0",
    "-0.0",
    "-1",
    "1e308",
    "true",
    "false",
    "null",
    '"x"',
    '"1e3"',
    '""',
    "[]",
    "{}",
    "[1, 2]",
    '{"a": [[[[[]]]]]}',
    "[" * 300 + "]" * 300,
    *BIG_INTS,
]


def _float_text(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(x)


json_number_text = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(_float_text),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["1e-300", "1e300", "95", "100", "0.5", "1e12", "1e30"]),
)
value_text = st.one_of(st.sampled_from(HOSTILE_LITERALS), json_number_text)

RECORD_FIELDS = [
    "net_energy_j",
    "duration_s",
    "total_flops",
    "mean_util",
    "tb_moved",
    "idle_power_w",
    "energy_j",
    "steps",
    "flops_per_step",
    "coverage",
    "label",
    "dtype",
    "config",
    "simulated",
    "schema",
    "fingerprint",
    "device_name",
]
SEED_FIELDS = [
    "net_energy_j",
    "duration_s",
    "tb_moved",
    "ground_truth_tf",
    "avg_gpu_pct",
    "idle_baseline_mw",
    "label",
    "config",
]


def _mutate(obj: dict[str, Any], muts: list[tuple[str, str | None]]) -> str:
    """JSON text of ``obj`` with each (field, raw JSON text) applied; None deletes the field."""
    d = dict(obj)
    raws: dict[str, str] = {}
    for k, (field, raw) in enumerate(muts):
        if raw is None:
            d.pop(field, None)
        else:
            token = f"__RAW{k}__"
            d[field] = token
            raws[f'"{token}"'] = raw
    text = json.dumps(d)
    for token, raw in raws.items():
        text = text.replace(token, raw)
    return text


# flat (record index, field, raw value or None = delete) triples: cheaper to draw than nested lists
record_mutations = st.lists(
    st.tuples(st.integers(0, 7), st.sampled_from(RECORD_FIELDS), st.one_of(st.none(), value_text)), max_size=4
)


def _write(tmp: Path, name: str, data: str | bytes) -> Path:
    p = tmp / name
    if isinstance(data, bytes):
        p.write_bytes(data)
    else:
        p.write_text(data, encoding="utf-8")
    return p


def _check_record_set(rs: Any) -> None:
    from flopwatch.records import MIN_DURATION_S

    for r in rs:
        assert math.isfinite(r.net_energy_j) and r.net_energy_j >= 0
        assert math.isfinite(r.duration_s) and r.duration_s >= MIN_DURATION_S
        assert r.total_flops is not None and math.isfinite(r.total_flops) and r.total_flops > 0
        if r.mean_util is not None:
            assert 0.0 <= r.mean_util <= 1.0
        if r.tb_moved is not None:
            assert math.isfinite(r.tb_moved) and r.tb_moved >= 0
        if r.idle_power_w is not None:
            assert math.isfinite(r.idle_power_w) and r.idle_power_w >= 0


def _calibrate_and_estimate(rs: Any) -> None:
    from flopwatch.estimate import calibrate

    if len(rs) < 3:
        return
    try:
        prof = calibrate(rs, model="eq2")
    except FlopwatchError:
        return
    try:
        prof.estimate_records(rs)
    except FlopwatchError:
        pass


# ------------------------------------------------------------------------------------------- records


@settings(max_examples=examples("records"))
@given(muts=record_mutations, truncate=st.one_of(st.none(), st.integers(0, 2000)), blank=st.booleans())
def test_records_jsonl(tmp_path: Path, muts: list, truncate: int | None, blank: bool) -> None:
    from flopwatch.records import load_records

    good = make_corpus.good_records()
    lines = [json.dumps(r) for r in good]
    by_rec: dict[int, list[tuple[str, str | None]]] = {}
    for idx, field, raw in muts:
        by_rec.setdefault(idx, []).append((field, raw))
    for idx, m in by_rec.items():
        lines[idx] = _mutate(good[idx], m)
    text = ("\n\n" if blank else "\n").join(lines) + "\n"
    if truncate is not None:
        text = text[:truncate]
    p = _write(tmp_path, "r.jsonl", text)
    try:
        rs = load_records(p, require=("net_energy_j", "duration_s", "total_flops"))
    except InputError as e:
        assert str(p) in str(e)
        return
    _check_record_set(rs)
    _calibrate_and_estimate(rs)


seed_mutation = st.tuples(st.sampled_from(SEED_FIELDS), st.one_of(st.none(), value_text))


@settings(max_examples=examples("seed_records"))
@given(
    muts=st.lists(st.tuples(st.integers(0, 4), st.lists(seed_mutation, min_size=1, max_size=3)), max_size=3),
    baseline=st.one_of(st.none(), value_text),
    records_raw=st.one_of(st.none(), st.sampled_from(["5", '"x"', "{}", "null", "[" * 2000 + "]" * 2000])),
)
def test_records_seed_format(
    tmp_path: Path, muts: list, baseline: str | None, records_raw: str | None
) -> None:
    from flopwatch.records import load_records

    recs = [
        {
            "label": f"d{i}",
            "net_energy_j": 300.0 + 40 * i,
            "duration_s": 100.0 + 10 * i,
            "tb_moved": 0.1,
            "ground_truth_tf": 50.0 + 5 * i,
            "avg_gpu_pct": 95.0,
            "idle_baseline_mw": 4000,
            "config": {"precision": "fp32"},
        }
        for i in range(5)
    ]
    texts = [json.dumps(r) for r in recs]
    for idx, m in muts:
        texts[idx] = _mutate(recs[idx], m)
    body = records_raw if records_raw is not None else "[" + ", ".join(texts) + "]"
    doc = '{"records": ' + body + (f', "baseline_mw": {baseline}' if baseline is not None else "") + "}"
    p = _write(tmp_path, "eval_results_x_records.json", doc)
    try:
        rs = load_records(p, require=("net_energy_j", "duration_s", "total_flops"))
    except InputError as e:
        assert str(p) in str(e)
        return
    _check_record_set(rs)
    _calibrate_and_estimate(rs)


# ------------------------------------------------------------------------------------------- profiles

_PROFILE = make_corpus.good_profile()


def _paths(d: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(d, dict):
        for k, v in d.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(d, list):
        for i, v in enumerate(d[:3]):
            out += _paths(v, (*prefix, i))
    return out


PROFILE_PATHS = _paths(_PROFILE)


def _set_raw(d: Any, path: tuple, token: str) -> None:
    node = d
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = token


@settings(max_examples=examples("profile"))
@given(muts=st.lists(st.tuples(st.sampled_from(PROFILE_PATHS), value_text), min_size=1, max_size=3))
def test_profile_load(tmp_path: Path, muts: list) -> None:
    from flopwatch.estimate.profile import Profile

    d = json.loads(json.dumps(_PROFILE))
    raws = {}
    for k, (path, raw) in enumerate(muts):
        try:
            _set_raw(d, path, f"__RAW{k}__")
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced a parent
        raws[f'"__RAW{k}__"'] = raw
    text = json.dumps(d)
    for token, raw in raws.items():
        text = text.replace(token, raw)
    p = _write(tmp_path, "p.json", text)
    try:
        prof = Profile.load(p)
    except InputError as e:
        assert str(p) in str(e)
        return
    # accepted: every number estimation reads is finite, and estimating raises only flopwatch errors
    assert all(math.isfinite(v) for v in prof.params.values())
    assert math.isfinite(float(prof._data["interval"]["log_halfwidth"]))
    try:
        prof.estimate(500.0, 120.0, tb_moved=0.07, mean_util=0.95)
    except FlopwatchError:
        pass


# ------------------------------------------------------------------------------------------- CSVs

CSV_CELLS = st.one_of(
    st.sampled_from(
        ["", "nan", "inf", "-inf", "-1", "0", "1e999", "1e308", "999999999999", "x", '"', "1,2", "True", "\t"]
        + BIG_INTS[:1]
    ),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**6), 10**6).map(str),
)
CSV_COLUMNS = [
    "batch_size",
    "dtype",
    "context_window",
    "warmup_iterations",
    "cooldown_seconds",
    "tokens_per_second_mean",
    "mfu_percentage_calflops_mean",
    "gpu_utilization_mean",
    "power_draw_watts_mean",
    "calflops_total_mean",
    "samples_per_config",
    "model_name",
]


@settings(max_examples=examples("csv"))
@given(
    cells=st.lists(st.tuples(st.sampled_from(CSV_COLUMNS), CSV_CELLS), max_size=4),
    drop_line=st.one_of(st.none(), st.integers(0, 6)),
)
def test_mascots_csv(tmp_path: Path, cells: list, drop_line: int | None) -> None:
    import numpy as np

    from flopwatch.powermodel.datasets import read_aggregate_csv

    text = make_corpus.csv_text(**dict(cells))
    if drop_line is not None:
        lines = text.splitlines()
        text = "\n".join(lines[:drop_line] + lines[drop_line + 1 :]) + "\n"
    p = _write(tmp_path, "agg.csv", text)
    try:
        loaded = read_aggregate_csv(p, gpu="A100")
    except InputError as e:
        assert str(p) in str(e)
        return
    df = loaded.df
    for col in ("power_w", "mfu_pct", "gpu_util_pct", "tokens_per_s", "flops_per_step"):
        v = df[col].to_numpy(dtype=float)
        assert not np.isinf(v).any()
    assert (df["power_w"].dropna() > 0).all() and (df["power_w"].dropna() <= 600).all()
    assert df["mfu_pct"].dropna().between(0, 100).all()


# ------------------------------------------------------------------------------------------- schedules

SCHED_KEYS = [
    "idle_s",
    "steps",
    "duration_s",
    "warmup_steps",
    "label",
    "flops_per_step",
    "bytes_per_step",
    "tokens_per_step",
    "batch_size",
    "dtype",
    "num_layers",
    "config",
    "sweep",
    "workload",
]


@settings(max_examples=examples("schedule"))
@given(
    items=st.lists(
        st.lists(st.tuples(st.sampled_from(SCHED_KEYS), st.one_of(st.none(), value_text)), max_size=4),
        min_size=1,
        max_size=3,
    ),
    wrapped=st.booleans(),
)
def test_schedule(tmp_path: Path, items: list, wrapped: bool) -> None:
    from flopwatch.sim.sensor import load_schedule

    base = {"label": "w", "flops_per_step": 1e12, "bytes_per_step": 1e9, "tokens_per_step": 1024, "steps": 10}
    text = "[" + ", ".join(_mutate(base, m) for m in items) + "]"
    p = _write(tmp_path, "s.json", '{"schedule": ' + text + "}" if wrapped else text)
    try:
        sched = load_schedule(p)
    except InputError as e:
        assert str(p) in str(e)
        return
    for it in sched:
        for name in ("idle_s", "duration_s"):
            v = getattr(it, name, None)
            assert v is None or (math.isfinite(v) and v >= 0)
        steps = getattr(it, "steps", None)
        assert steps is None or steps >= 1


# ------------------------------------------------------------------------------------------- configs

CONFIG_KEYS = [
    "sensors",
    "ledger",
    "metrics_port",
    "metrics_addr",
    "poll_s",
    "sample_hz",
    "checkpoint_s",
    "speed",
    "idle_power_w",
    "threshold_flops",
    "start_polls",
    "end_polls",
    "util_threshold",
    "dtype",
    "seed",
    "bogus",
]
TOML_VALUES = st.one_of(
    st.sampled_from(
        ["inf", "-inf", "nan", "1e999", "0", "-1", "'x'", "[]", "[1, 'a']", "{}", "true"] + BIG_INTS
    ),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(2**70), 2**70).map(str),
)


@settings(max_examples=examples("config"))
@given(kv=st.lists(st.tuples(st.sampled_from(CONFIG_KEYS), TOML_VALUES), max_size=5), table=st.booleans())
def test_monitor_config(tmp_path: Path, kv: list, table: bool) -> None:
    from flopwatch.monitor.config import MonitorConfig

    seen = {}
    for k, v in kv:
        seen[k] = v  # TOML refuses duplicate keys: keep the last
    body = "".join(f"{k} = {v}\n" for k, v in seen.items())
    p = _write(tmp_path, "m.toml", ("[monitor]\n" if table else "") + body)
    try:
        MonitorConfig.from_toml(p).validate(str(p))
    except InputError as e:
        assert str(p) in str(e)


# ------------------------------------------------------------------------------------------- raw input


LOADERS = ["records", "profile", "csv", "schedule_json", "schedule_toml", "config", "powermodel"]


def _load(kind: str, p: Path) -> None:
    if kind == "records":
        from flopwatch.records import load_records

        load_records(p)
    elif kind == "profile":
        from flopwatch.estimate.profile import Profile

        Profile.load(p)
    elif kind == "csv":
        from flopwatch.powermodel.datasets import read_aggregate_csv

        read_aggregate_csv(p, gpu="A100")
    elif kind.startswith("schedule"):
        from flopwatch.sim.sensor import load_schedule

        load_schedule(p)
    elif kind == "config":
        from flopwatch.monitor.config import MonitorConfig

        MonitorConfig.from_toml(p).validate(str(p))
    else:
        from flopwatch.powermodel.fit import PowerModelResult

        PowerModelResult.load(p)


SUFFIX = {"schedule_toml": ".toml", "config": ".toml", "csv": ".csv", "records": ".jsonl"}


@settings(max_examples=examples("raw_bytes"))
@given(kind=st.sampled_from(LOADERS), data=st.one_of(st.binary(max_size=300), st.text(max_size=300)))
def test_random_bytes_and_text(tmp_path: Path, kind: str, data: bytes | str) -> None:
    p = _write(tmp_path, "in" + SUFFIX.get(kind, ".json"), data)
    try:
        _load(kind, p)
    except InputError as e:
        assert str(p) in str(e)


JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.floats(), st.integers(), st.text(max_size=5)),
    lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(st.text(max_size=5), c, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=examples("json_text"))
@given(kind=st.sampled_from(["records", "profile", "schedule_json", "powermodel"]), doc=JSONISH)
def test_arbitrary_json_documents(tmp_path: Path, kind: str, doc: Any) -> None:
    p = _write(tmp_path, "in" + SUFFIX.get(kind, ".json"), json.dumps(doc))
    try:
        _load(kind, p)
    except InputError as e:
        assert str(p) in str(e)


@pytest.mark.parametrize(
    "text", ["[" * 100_000, "{" + '"a":{' * 100_000, "a = " + "[" * 100_000], ids=["array", "object", "toml"]
)
def test_parsers_survive_100000_deep(text: str) -> None:
    with pytest.raises(InputError):
        parse_toml(text) if text.startswith("a =") else parse_json(text)
