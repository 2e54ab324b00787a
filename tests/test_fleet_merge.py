"""groups.merge of partial group tables (one per GPU chunk): each group keeps its own devices, dtypes and
impossible claims, and its sums add, whatever the order the chunks come in."""

from __future__ import annotations

import numpy as np

from flopwatch.devices import get_device
from flopwatch.fleet import groups as G


def _part(keys, devices, dtypes, impossible, energy):  # noqa: ANN001, ANN202
    n = len(keys)
    return G.GroupTable(
        key=np.array(keys, dtype=object),
        gpus=np.ones(n, int),
        sums={"energy_j": np.asarray(energy, float)},
        lo={c: np.full(n, np.nan) for c in G._MIN},
        hi={c: np.full(n, np.nan) for c in G._MAX},
        devices=devices,
        dtypes=dtypes,
        any_unknown_model=np.zeros(n, bool),
        impossible=impossible,
        no_energy_estimate=np.zeros(n),
    )


def test_merge_keeps_each_groups_devices_dtypes_and_claims():
    h100, a100 = get_device("h100"), get_device("a100")
    a = _part(
        ["job-a", "job-b"], [[h100], [a100]], [["bf16"], ["fp32"]], [[], ["Orin Nano (power 700 W)"]], [1, 2]
    )
    b = _part(["job-b", "job-c"], [[h100], []], [["bf16"], ["bf16"]], [[], []], [3, 4])
    for parts in ([a, b], [b, a]):
        t = G.merge(parts)
        assert list(t.key) == ["job-a", "job-b", "job-c"]
        assert [[d.key for d in x] for x in t.devices] == [
            ["h100"],
            ["h100", "a100"],
            [],
        ]  # most capable first
        assert t.dtypes == [["bf16"], ["bf16", "fp32"], ["bf16"]]
        assert t.impossible == [[], ["Orin Nano (power 700 W)"], []]
        assert list(t.sums["energy_j"]) == [1.0, 5.0, 4.0] and list(t.gpus) == [1, 2, 1]
