"""Span resolution (``flopwatch.fleet.span``) without a server: the array placement equals the window reader's
Accumulator on the same sample counts, and the PromQL it asks for."""

from __future__ import annotations

import numpy as np
import pytest

from flopwatch.errors import InputError
from flopwatch.fleet.aggregate import Accumulator
from flopwatch.fleet.reader import ReadPlan, WindowBlock
from flopwatch.fleet.span import ID_LABELS, place, span_queries
from flopwatch.telemetry import dcgm_metrics as M

W, STEP = 3600.0, 15.0
FULL = W / STEP  # scrapes in a whole window


def _counts(rng: np.random.Generator, n_gpus: int, k: int) -> tuple[np.ndarray, list[dict[str, str]]]:
    """Sample counts of jobs coming and going on GPUs: runs of windows, partial edges, missed scrapes, gaps."""
    rows, labels = [], []
    for g in range(n_gpus):
        t = 0
        j = 0
        while t < k:
            length = int(rng.integers(1, 6))
            row = np.zeros(k)
            stop = min(k, t + length)
            row[t:stop] = rng.binomial(int(FULL), rng.uniform(0.6, 1.0), stop - t)
            row[t] = rng.integers(1, FULL)  # starts inside its first window
            if stop - 1 > t and rng.random() < 0.7:
                row[stop - 1] = rng.integers(1, FULL)  # ends inside its last
            if rng.random() < 0.2 and stop - t > 2:
                row[t + 1] = 0  # left and came back
            rows.append(row)
            lab = {"UUID": f"GPU-{g}", "modelName": "NVIDIA H100 80GB HBM3", "gpu": str(g % 8)}
            if rng.random() < 0.8:
                lab["pod"] = f"p{g}-{j}"
            else:
                lab["instance"] = f"idle-{g}-{j}"  # unattributed
            labels.append(lab)
            j += 1
            t = stop + int(rng.integers(0, 2))
    return np.array(rows), labels


@pytest.mark.parametrize("seed", range(6))
def test_place_equals_the_accumulator(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 30))
    N, labels = _counts(rng, int(rng.integers(1, 12)), k)
    t_ends = 1_700_000_000.0 + W * np.arange(1, k + 1)
    gids = [M.gpu_id(lab) for lab in labels]
    covered, duration, t_first, t_last = place(N, t_ends, gids, STEP, W)

    acc = Accumulator(("pod",), STEP, W)
    # the window reader sees the same counts, time chunk by time chunk
    for a in range(0, k, 7):
        b = min(k, a + 7)
        block = N[:, a:b].copy()
        block[block == 0] = np.nan
        acc.add(WindowBlock(t=t_ends[a:b], labels=labels, values={"p_n": block}))
    jobs = {(j.group, j.gpu): j for j in acc.finish()}
    for i, lab in enumerate(labels):
        if "pod" not in lab or N[i].sum() == 0:
            continue
        j = jobs[(lab["pod"], gids[i])]
        assert j.covered_s == pytest.approx(covered[i])
        assert j.duration_s == pytest.approx(duration[i])
        assert j.t_first == pytest.approx(t_first[i])
        assert j.t_last == pytest.approx(t_last[i])


def test_place_of_nothing() -> None:
    c, d, a, b = place(np.zeros((0, 3)), np.arange(3.0), [], STEP, W)
    assert c.size == d.size == a.size == b.size == 0


def test_span_queries_raw_and_rules() -> None:
    present = frozenset(M.METRICS)
    by = ", ".join(ID_LABELS)
    raw = span_queries(present, 'namespace="x"', "86400000ms", by)
    e = f'{M.ENERGY}{{namespace="x"}}[86400000ms]'
    assert raw["e_delta"] == f"max by ({by}) (max_over_time({e})) - min by ({by}) (min_over_time({e}))"
    assert raw["e_resets"] == f"sum by ({by}) (resets({e}))"
    assert raw["tensor"].endswith(f'(sum_over_time({M.HMMA}{{namespace="x"}}[86400000ms]))')  # HMMA on Hopper
    assert "gpu_util" not in raw  # a fallback for GR_ENGINE_ACTIVE only
    assert "p_sum" not in raw  # the counter is there: no pass over the power samples
    rules = span_queries(present, "", "1d", by, rules_window_s=3600)
    assert rules["e_max"].startswith("max by") and "flopwatch:" in rules["e_max"]
    assert rules["gr"] == f"sum by ({by}) (sum_over_time(flopwatch:{M.GR_ACTIVE}:sum1h[1d]))"
    no_counter = span_queries(present - {M.ENERGY}, "", "1d", by)
    assert "p_sum" in no_counter and "e_delta" not in no_counter
    # job- and GPU-level rules: per GPU only the counter's difference, utilisation and the sample counts
    lean = span_queries(
        present, "", "1d", by, rules_window_s=3600, job_level=True, gpu_level_resets=True, dram=False
    )
    assert sorted(lean) == ["e_delta", "gr"]
    assert lean["e_delta"] == (
        f"max by ({by}) (max_over_time(flopwatch:{M.ENERGY}:max1h[1d])) - "
        f"min by ({by}) (min_over_time(flopwatch:{M.ENERGY}:min1h[1d]))"
    )
    assert set(span_queries(present, "", "1d", by, rules_window_s=3600, job_level=True)) == {
        "e_max",
        "e_min",
        "e_last",
        "e_resets",
        "gr",
        "dram",
    }


def test_plan_resolution_is_checked() -> None:
    with pytest.raises(InputError, match="resolution"):
        ReadPlan(0, 3600, resolution="fine").check()
    with pytest.raises(InputError, match="window"):
        ReadPlan(0, 3600, resolution="span", exact_clock=True).check()
