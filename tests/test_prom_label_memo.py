"""The label memo (prom_answer.LabelMemo): an answer whose label list equals one already checked skips the label
checks, and nothing the checks refuse gets past it (benchmarks/RESULTS.md, "Fleet")."""

from __future__ import annotations

import json

import pytest

from flopwatch.telemetry import prom_answer as PA

T = 1_700_000_000


def _doc(labels: list[object]) -> dict:
    res = [{"metric": lab, "values": [[T, "1"]]} for lab in labels]
    return json.loads(json.dumps({"resultType": "matrix", "result": res}))


GOOD = [{"UUID": f"GPU-{i}", "pod": "a" if i % 2 else "b"} for i in range(50)]


def test_equal_label_list_is_taken_from_the_memo():
    memo = PA.LabelMemo()
    first, _, _ = PA._matrix(_doc(GOOD), T - 1, T + 1, memo)
    assert memo.known(list(first.labels)) == GOOD and memo.known(first.labels[:-1]) is None
    again, _, _ = PA._matrix(_doc(GOOD), T - 1, T + 1, memo)  # a fresh decode: equal, not the same objects
    assert [dict(x) for x in again.labels] == GOOD and again.n.tolist() == [1] * 50
    # the checked maps, shared (the reader's comparison meets the same objects), in a list of its own
    assert (
        all(a is b for a, b in zip(again.labels, first.labels, strict=True))
        and again.labels is not first.labels
    )


@pytest.mark.parametrize(
    "bad, msg",
    [
        (
            [*GOOD[:-1], {"UUID": 7, "pod": "a"}],
            "not a map of strings",
        ),  # a number where the memo holds a str
        ([*GOOD[:-1], {"UUID": "GPU-48", "pod": "b"}], "appears twice"),
        ([*GOOD[:-1], ["UUID", "GPU-49"]], "not a map of strings"),
        ([*GOOD[:-1], {"UUID": None, "pod": "a"}], "not a map of strings"),
        ([*GOOD[:-1], {1: "x"}], None),  # JSON keys are strings: json.dumps turns 1 into "1" (accepted)
    ],
)
def test_memo_never_admits_what_the_checks_refuse(bad: list[object], msg: str | None):
    memo = PA.LabelMemo()
    PA._matrix(_doc(GOOD), T - 1, T + 1, memo)
    if msg is None:
        cols, _, _ = PA._matrix(_doc(bad), T - 1, T + 1, memo)
        assert cols.labels[-1] == {"1": "x"}
        return
    with pytest.raises(PA._Refused, match=msg):
        PA._matrix(_doc(bad), T - 1, T + 1, memo)
    with pytest.raises(PA._Refused, match=msg):  # and the same without a memo
        PA._matrix(_doc(bad), T - 1, T + 1)


def test_memo_keeps_the_last_few():
    memo = PA.LabelMemo(size=2)
    a, b, c = [[{"x": str(i)}] for i in range(3)]
    for m in (a, b, c):
        memo.add(m)
    assert (
        memo.known([{"x": "0"}]) is None and memo.known([{"x": "1"}]) == b and memo.known([{"x": "2"}]) == c
    )


def test_query_form_is_urlencode_with_selectors_quoted_once():
    """The client quotes a query's selectors through a cache (a chunk's queries share hundreds of UUIDs): the form
    is byte for byte ``urlencode``'s, whatever the text."""
    import random
    import urllib.parse

    from flopwatch.telemetry.prom_client import _SELECTOR, _quote

    rng = random.Random(3)
    chars = 'abc{}[]()"=~|,. \n\t%&+/?#é😀'
    for _ in range(3000):
        params = [
            ("query", "".join(rng.choice(chars) for _ in range(rng.randint(0, 30)))),
            ("match[]", "{a}"),
        ]
        form = "&".join(f"{_quote(k)}={''.join(map(_quote, _SELECTOR.split(v)))}" for k, v in params)
        assert form == urllib.parse.urlencode(params)
