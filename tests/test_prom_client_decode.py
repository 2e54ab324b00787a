"""The Prometheus client's fast answer checks (C-level passes, the garbage collector paused) refuse what the
per-series checks refused (benchmarks/RESULTS.md, "Fleet": the speed-up must not cost strictness)."""

from __future__ import annotations

import gc
import json
import threading

import numpy as np
import pytest

from flopwatch.telemetry import prom_answer as PC

T = 1_700_000_000


def _matrix_doc(series: list[tuple[dict, list]]) -> bytes:
    body = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    for labels, values in series:
        body["data"]["result"].append({"metric": labels, "values": values})
    return json.dumps(body).encode()


HONEST = _matrix_doc(
    [
        ({"UUID": "GPU-1", "pod": "a"}, [[T, "1.5"], [T + 60, "2"]]),
        ({"UUID": "GPU-2", "pod": "a"}, [[T, "0"], [T + 60, "1e3"]]),
        ({"UUID": "GPU-3"}, [[T + 60, "-4.25"]]),
    ]
)


def test_honest_answer_decodes_to_views():
    d, warn = PC._envelope(HONEST)
    cols, n_nan, n = PC._matrix(d, T - 100, T + 100)
    series = cols.series()
    assert warn == [] and (n_nan, n) == (0, 0) and cols.n.tolist() == [2, 2, 1]
    assert [dict(s.labels) for s in series] == [
        {"UUID": "GPU-1", "pod": "a"},
        {"UUID": "GPU-2", "pod": "a"},
        {"UUID": "GPU-3"},
    ]
    assert [s.t.tolist() for s in series] == [[T, T + 60], [T, T + 60], [T + 60]]
    assert [s.v.tolist() for s in series] == [[1.5, 2.0], [0.0, 1000.0], [-4.25]]
    assert series[0].v.base is series[1].v.base  # views into one array, no copy per series
    assert cols.v.tolist() == [1.5, 2.0, 0.0, 1000.0, -4.25]  # the fleet reader folds the columns as they are


def test_same_labels_in_another_key_order_are_one_series_twice():
    raw = _matrix_doc([({"a": "1", "b": "2"}, [[T, "1"]]), ({"b": "2", "a": "1"}, [[T, "2"]])])
    d, _ = PC._envelope(raw)
    with pytest.raises(PC._Refused, match="appears twice"):
        PC._matrix(d, T - 100, T + 100)
    # different label sets, some in another key order: not duplicates
    raw = _matrix_doc(
        [({"a": "1", "b": "2"}, [[T, "1"]]), ({"b": "3", "a": "1"}, [[T, "2"]]), ({"a": "1"}, [[T, "3"]])]
    )
    d, _ = PC._envelope(raw)
    assert len(PC._matrix(d, T - 100, T + 100)[0].labels) == 3


def test_label_checks_name_the_bad_map():
    for labels in ({"gpu": 0}, {"gpu": None}, ["gpu"]):
        d, _ = PC._envelope(_matrix_doc([({"ok": "1"}, [[T, "1"]]), (labels, [[T, "1"]])]))
        with pytest.raises(PC._Refused, match="not a map of strings"):
            PC._matrix(d, T - 100, T + 100)
    d, _ = PC._envelope(b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{}}]}}')
    with pytest.raises(PC._Refused, match="without 'values'"):
        PC._matrix(d, T - 100, T + 100)


def test_nan_samples_and_empty_series_take_the_slow_path():
    raw = _matrix_doc(
        [
            ({"s": "1"}, [[T, "1"], [T + 1, "NaN"], [T + 2, "3"]]),
            ({"s": "2"}, []),
            ({"s": "3"}, [[T, "NaN"]]),
            ({"s": "4"}, [[T, "7"]]),
        ]
    )
    d, _ = PC._envelope(raw)
    cols, n_nan, n_series = PC._matrix(d, T - 100, T + 100)
    series = cols.series()
    assert (n_nan, n_series) == (2, 2)
    assert [s.labels["s"] for s in series] == ["1", "4"]
    np.testing.assert_array_equal(series[0].t, [T, T + 2])
    np.testing.assert_array_equal(series[0].v, [1.0, 3.0])


def test_gc_pause_is_shared_by_threads_and_restored():
    assert gc.isenabled()
    barrier = threading.Barrier(4)
    seen = []

    def work():
        with PC.gc_paused():
            barrier.wait()
            seen.append(gc.isenabled())
            barrier.wait()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [False] * 4 and gc.isenabled()
    gc.disable()  # a caller that had paused it: left paused
    try:
        with PC.gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(ValueError), PC.gc_paused():
        raise ValueError  # an error inside still restores it
    assert gc.isenabled()


@pytest.mark.parametrize(
    "raw",
    [
        b'{"status": "success", "data": {"resultType": "vector", "result": []}, "x": NaN}',  # bare constant
        b'\xef\xbb\xbf{"status": "success", "data": 1}',  # a byte order mark
        b'{"status": "success", "data": ["\\ud800"]}',  # a lone surrogate
        b'{"status": "success", "data": [1e400]}',  # past a float
        # past 64 bits: orjson reads a float where json keeps the int, and the checks judge both alike
        b'{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": '
        b'[[99999999999999999999999, "1"]]}]}}',
        b'{"status": "success", "data": [1]} x',  # extra data
        b"[" * 2000 + b"]" * 2000,  # nested deeper than orjson's limit
    ],
)
def test_orjson_decodes_as_json_judges(raw):
    """``_envelope`` decodes with orjson and hands what it refuses to json: the answer or the refusal is json's."""

    def judged(f):
        try:
            d, warn = f(raw)
            got = PC._matrix(d, T, T + 60)[0] if isinstance(d, dict) else d
            return ("ok", repr(got), warn)
        except PC._Refused as e:
            return ("refused", str(e))

    def by_json(b):
        with pytest.MonkeyPatch.context() as m:  # orjson refuses everything: json alone decides
            m.setattr(
                PC.orjson, "loads", lambda _b: (_ for _ in ()).throw(PC.orjson.JSONDecodeError("x", "", 0))
            )
            return PC._envelope(b)

    assert judged(PC._envelope) == judged(by_json)


def test_orjson_and_json_agree_on_an_honest_fleet_answer():
    rng = np.random.default_rng(7)
    series = [
        ({"UUID": f"GPU-{i}", "modelName": "NVIDIA H100 80GB HBM3", "pod": f"p{i % 5}"},
         [[T + 60 * k, repr(float(x))] for k, x in enumerate(rng.normal(300, 200, 30))])
        for i in range(40)
    ]  # fmt: skip
    raw = _matrix_doc(series)
    assert PC.orjson.loads(raw) == json.loads(raw)
    cols = PC._matrix(PC._envelope(raw)[0], T - 100, T + 3600)[0]
    assert cols.v.tolist() == [float(v) for _l, vs in series for _t, v in vs]
