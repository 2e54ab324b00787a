"""A lying middlebox between ``fleet estimate`` and an honest Prometheus (issue 22, item 9).

A simulated fleet (simulated, not measured) is backfilled into a real Prometheus on loopback; a proxy
(:func:`hostile_http.proxy`) forwards every query and edits the answers. A ``"NaN"`` sample (Prometheus's spelling of
"no value") must reach the output as a named degradation; ``"+Inf"``, a string where a number belongs, a duplicated
series or a shifted timestamp must stop the estimate with one line (exit 2), never a silent number.
"""

from __future__ import annotations

import copy
import json

import pytest
from hostile_http import HostileServer, proxy

from prom_helpers import LocalPrometheus, backfill, find_tool

pytestmark = pytest.mark.skipif(
    find_tool("promtool") is None or find_tool("prometheus") is None,
    reason="needs promtool and prometheus (Debian package 'prometheus')",
)

WALL0 = 1_700_000_000.0
START, END = f"{WALL0:.0f}", f"{WALL0 + 3600:.0f}"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    from flopwatch.sim.dcgm import SimulatedFleet, random_schedule

    d = tmp_path_factory.mktemp("proxy")
    fleet = SimulatedFleet(
        4, 1.0, random_schedule(4, 1.0, gpus_per_node=4, seed=11), gpus_per_node=4, wall0=WALL0
    )
    fleet.write_openmetrics(d / "f.om")
    backfill(d / "f.om", d / "tsdb")
    with LocalPrometheus(d / "tsdb") as prom:
        yield prom.url


def _first_sample(doc):
    """The first [time, value] pair of a query answer, or None (label answers, empty results)."""
    data = doc.get("data")
    if not isinstance(data, dict):
        return None
    for r in data.get("result") or []:
        if "value" in r:
            return r["value"]
        if r.get("values"):
            return r["values"][0]
    return None


def _editing(edit_pair=None, edit_result=None):
    """An ``edit`` that changes the first sample (or the result list) of every query answer."""

    def edit(path, doc):
        if not path.endswith(("/query", "/query_range")):
            return doc
        doc = copy.deepcopy(doc)
        if edit_result is not None and isinstance(doc.get("data"), dict) and doc["data"].get("result"):
            edit_result(doc["data"]["result"])
        p = _first_sample(doc)
        if p is not None and edit_pair is not None:
            edit_pair(p)
        return doc

    return edit


def _fleet(capsys, url):
    from flopwatch.cli import main

    rc = main(["fleet", "estimate", "--prometheus", url, "--start", START, "--end", END, "--window", "30m",
               "--retries", "0", "--timeout", "30", "--json", "--verifier-operated"])  # fmt: skip
    out, err = capsys.readouterr()
    return rc, out, err


def test_honest_proxy_changes_nothing(upstream, capsys):
    rc0, direct, _ = _fleet(capsys, upstream)
    with HostileServer(proxy(upstream, lambda path, doc: doc)) as srv:
        rc1, via, err = _fleet(capsys, srv.url)
    assert rc0 == rc1 == 0, err
    a, b = json.loads(direct), json.loads(via)
    assert [g["energy_j"] for g in a["groups"]] == [g["energy_j"] for g in b["groups"]]
    assert not b["degradations"]


def test_nan_sample_is_a_named_degradation(upstream, capsys):
    def nan(p):
        p[1] = "NaN"

    with HostileServer(proxy(upstream, _editing(edit_pair=nan))) as srv:
        rc, out, err = _fleet(capsys, srv.url)
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["degradations"] and all("NaN" in x for x in doc["degradations"])
    assert all(any("degraded" in n for n in g["notes"]) for g in doc["groups"])


def _set(i, v):
    def edit(p):
        p[i] = v

    return edit


@pytest.mark.parametrize(
    ("name", "edit", "fragment"),
    [
        ("+Inf value", _editing(edit_pair=_set(1, "+Inf")), "not a finite decimal"),
        ("-1e309 value", _editing(edit_pair=_set(1, "-1e309")), "out of a float's range"),
        ("number value", _editing(edit_pair=_set(1, 1.5)), "not a string of a number"),
        ("null value", _editing(edit_pair=_set(1, None)), "not a string of a number"),
        (
            "timestamp a day late",
            _editing(edit_pair=lambda p: p.__setitem__(0, p[0] + 86400)),
            "outside the asked",
        ),
        ("duplicated series", _editing(edit_result=lambda r: r.append(copy.deepcopy(r[0]))), "appears twice"),
        ("label as a number", _editing(edit_result=lambda r: r[0]["metric"].update(gpu=0)), "map of strings"),
    ],
)
def test_lies_stop_the_estimate_with_one_line(upstream, capsys, name, edit, fragment):
    with HostileServer(proxy(upstream, edit)) as srv:
        rc, out, err = _fleet(capsys, srv.url)
    assert rc == 2 and err.count("\n") == 1 and fragment in err and "Traceback" not in err, (name, err)
    assert out == ""
