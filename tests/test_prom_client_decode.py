"""The Prometheus client's fast decoding (orjson, C-level checks, the garbage collector paused) refuses and
accepts exactly what the plain ``json`` path does (benchmarks/RESULTS.md, "Fleet": the speed-up must not cost
strictness)."""

from __future__ import annotations

import gc
import json
import threading

import numpy as np
import pytest

from flopwatch.telemetry import prom_client as PC

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

BODIES = {
    "honest": HONEST,
    "bare NaN": b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,NaN]}]}}',
    "bare Infinity": b'{"status":"success","data":Infinity}',
    "deep": b"[" * 5000 + b"]" * 5000,
    "400-digit integer": b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":['
    + b"9" * 400
    + b',"1"]}]}}',
    "lone surrogate label": b'{"status":"success","data":{"resultType":"vector","result":'
    b'[{"metric":{"a":"\\ud800"},"value":[1700000000,"1"]}]}}',
    "UTF-8 BOM": b'\xef\xbb\xbf{"status":"success","data":{"resultType":"vector","result":[]}}',
    "invalid UTF-8": b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"\xff"}}]}}',
    "trailing garbage": HONEST + b"x",
    "duplicate keys": b'{"status":"error","status":"success","data":{"resultType":"vector","result":[]}}',
    "HTML": b"<html>login</html>",
}


def _outcome(raw: bytes, fast: object) -> tuple[str, object]:
    saved = PC._ORJSON
    PC._ORJSON = fast
    try:
        d, warn = PC._envelope(raw)
        if isinstance(d, dict) and d.get("resultType") == "matrix":
            series, n_nan, n = PC._matrix(d, T - 100, T + 100)
            return "ok", [(dict(s.labels), s.t.tolist(), s.v.tolist()) for s in series]
        return "ok", json.dumps(d, sort_keys=True)
    except PC._Refused as e:
        return "refused", str(e)
    finally:
        PC._ORJSON = saved


@pytest.mark.parametrize("name", sorted(BODIES))
def test_orjson_and_json_agree(name):
    orjson = pytest.importorskip("orjson")
    fast, slow = _outcome(BODIES[name], orjson.loads), _outcome(BODIES[name], None)
    assert fast == slow, name
    if name == "honest":
        assert fast[0] == "ok" and len(fast[1]) == 3 and fast[1][1][2] == [0.0, 1000.0]
    if name in ("bare NaN", "bare Infinity", "deep", "HTML", "trailing garbage", "invalid UTF-8"):
        assert fast[0] == "refused", (name, fast)


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
    assert len(PC._matrix(d, T - 100, T + 100)[0]) == 3


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
    series, n_nan, n_series = PC._matrix(d, T - 100, T + 100)
    assert (n_nan, n_series) == (2, 2)
    assert [s.labels["s"] for s in series] == ["1", "4"]
    np.testing.assert_array_equal(series[0].t, [T, T + 2])
    np.testing.assert_array_equal(series[0].v, [1.0, 3.0])


def test_gc_pause_is_shared_by_threads_and_restored():
    assert gc.isenabled()
    barrier = threading.Barrier(4)
    seen = []

    def work():
        with PC._no_gc():
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
        with PC._no_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(ValueError), PC._no_gc():
        raise ValueError  # an error inside still restores it
    assert gc.isenabled()
