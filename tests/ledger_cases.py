"""The ledger compatibility fixture ``tests/data/ledger/old_v2.db`` (+ ``.pub``) and the payload it signs.

The fixture was written by commit b4a7968, when ``canonical_payload`` had its own converter (``_clean``);
``tests/test_ledger_compat.py`` checks that today's code (``io.jsonable`` under the same JSON options) still
verifies it and re-makes its stored payload text byte for byte. To re-make it, copy this file into a checkout
of b4a7968 and run ``PYTHONPATH=src python ledger_cases.py OUTDIR``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

OLD_LEDGER = Path(__file__).parent / "data" / "ledger" / "old_v2.db"


def tricky_payload() -> dict[str, Any]:
    """Every kind of value a ledger payload holds: non-finite floats, numpy scalars, tuples, odd keys, text."""
    return {
        "nan": float("nan"),
        "inf": float("inf"),
        "ninf": float("-inf"),
        "np_f64": np.float64(0.1),
        "np_f32": np.float32(0.1),
        "np_i64": np.int64(2**40),
        "np_bool": np.bool_(True),
        "np_nan": np.float64("nan"),
        "np_0d": np.array(3.5),
        "big_int": 10**30,
        "neg_zero": -0.0,
        "subnormal": 5e-324,
        "tuple": (1, 2.5, (float("nan"), "x")),
        "text": 'µs — 温度 \x1b[31m"quoted"\n',
        "keys": {1: "int", 2.5: "float", None: "none"},
        "nested": [{"z": 1, "a": [np.float64("inf"), None, False]}],
    }


# the rows the fixture holds after its genesis, in order
ROWS: list[tuple[str, dict[str, Any]]] = [
    ("start", {"session_id": "s-old", "wall": 1.7e9}),
    ("workload", tricky_payload()),
    ("stop", {"session_id": "s-old", "wall": 1.7e9 + 60, "reason": "SIGTERM"}),
]


def write_old_ledger(out: Path) -> None:
    from flopwatch.monitor.ledger import Ledger

    out.mkdir(parents=True, exist_ok=True)
    with Ledger(out / "old_v2.db", key_path=out / "old_v2.db.key") as led:
        for kind, payload in ROWS:
            led.append(kind, payload)


if __name__ == "__main__":
    write_old_ledger(Path(sys.argv[1]))
