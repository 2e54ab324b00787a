"""Estimator inputs as arrays, and the explicit, reported record filters (frontier gate, precision).

The Jetson study (Fowler 2026) calibrates only on "frontier" runs: mean GPU utilisation ≥ 80 %, and its
headline evaluation uses the fp32 runs only. Both filters are parameters here; what they exclude is
returned with a reason per record so the CLI can report it — nothing is dropped silently.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from flopwatch.devices import normalize_dtype
from flopwatch.errors import InputError
from flopwatch.records import RecordSet, WorkloadRecord, as_record_set

DEFAULT_MIN_UTIL = 0.8  # the study's frontier gate: mean GPU utilisation >= 80 %
DEFAULT_PRECISION = "fp32"


@dataclass(frozen=True)
class FrontierGate:
    """Which records a calibration or evaluation may use.

    ``min_util``: minimum mean utilisation (0–1); 0 disables the gate. ``precision``: a dtype name, or
    ``"all"`` for every precision (mixing precisions in one calibration is rarely meaningful: J/FLOP differs
    by 3–4× between fp32 and fp16 on the Jetson data). Records with unknown utilisation fail a non-zero gate.
    """

    min_util: float = DEFAULT_MIN_UTIL
    precision: str = DEFAULT_PRECISION

    def __post_init__(self) -> None:
        if not (isinstance(self.min_util, (int, float)) and 0.0 <= float(self.min_util) <= 1.0):
            raise InputError(
                f"must be between 0 and 1 (a fraction, not a percentage), got {self.min_util!r}",
                field="min_util",
            )
        if self.precision != "all":
            object.__setattr__(self, "precision", normalize_dtype(self.precision))

    def reason(self, r: WorkloadRecord) -> str | None:
        """Why ``r`` is excluded, or None when it passes."""
        if self.precision != "all" and r.dtype != self.precision:
            return f"precision {r.dtype} != {self.precision}"
        if self.min_util > 0:
            if r.mean_util is None:
                return "mean utilisation unknown"
            if r.mean_util < self.min_util:
                # enough digits that a value just under the gate never prints as equal to it ("80% < 80%")
                digits = next((d for d in range(6) if round(r.mean_util * 100, d) < self.min_util * 100), 6)
                return f"mean utilisation {r.mean_util:.{digits}%} < {self.min_util:.0%}"
        rc = r.raw.get("returncode")
        if isinstance(rc, int) and not isinstance(rc, bool) and rc != 0:
            return f"run failed (returncode {rc})"
        return None

    def apply(self, records: RecordSet | Sequence[WorkloadRecord]) -> GateResult:
        rs = as_record_set(records)
        kept: list[WorkloadRecord] = []
        excluded: list[tuple[str, str]] = []
        # runs that fail only the precision filter, per precision: the hint when too few runs are left
        other: Counter[str] = Counter()
        for r in rs:
            why = self.reason(r)
            if why is None:
                kept.append(r)
            else:
                excluded.append((r.label, why))
                if why.startswith("precision") and FrontierGate(self.min_util, "all").reason(r) is None:
                    other[r.dtype] += 1
        return GateResult(rs.subset(kept), excluded, self, n_input=len(rs), other_precisions=dict(other))

    def to_dict(self) -> dict[str, Any]:
        return {"min_util": float(self.min_util), "precision": self.precision}


@dataclass
class GateResult:
    """Outcome of a :class:`FrontierGate`: the kept records and each excluded label with its reason."""

    kept: RecordSet
    excluded: list[tuple[str, str]]
    gate: FrontierGate
    n_input: int
    other_precisions: dict[str, int] = field(default_factory=dict)  # dtype → runs failing only precision

    def counts(self) -> dict[str, int]:
        """Excluded records per kind of reason ("precision", "mean", "run", …) — for reports."""
        c: Counter[str] = Counter()
        for _, why in self.excluded:
            if why.startswith("precision"):
                c["precision"] += 1
            elif why.startswith("mean utilisation unknown"):
                c["util_unknown"] += 1
            elif why.startswith("mean utilisation"):
                c["below_min_util"] += 1
            else:
                c["failed_run"] += 1
        return dict(c)

    def describe(self) -> str:
        """One line for messages: the filters, what they excluded, and which other precisions would pass."""
        counts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in self.counts().items()) or "none"
        text = f"min util {self.gate.min_util:.0%}, precision {self.gate.precision}; excluded: {counts}"
        if self.other_precisions:
            best = max(sorted(self.other_precisions), key=self.other_precisions.__getitem__)
            runs = ", ".join(f"{k} {v}" for k, v in sorted(self.other_precisions.items()))
            text += f"; frontier runs of other precisions: {runs} (use --precision {best})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.gate.to_dict(),
            "n_input": self.n_input,
            "n_kept": len(self.kept),
            "n_excluded": len(self.excluded),
            "excluded_counts": self.counts(),
            "excluded": [{"label": lab, "reason": why} for lab, why in self.excluded],
        }


@dataclass
class Features:
    """Column arrays of what an estimator may look at (never the ground truth).

    Arrays may be 1-D (n records) or batched 2-D (splits × records) for vectorised evaluation.
    ``tb_moved``/``mean_util`` are NaN where unknown.
    """

    net_energy_j: np.ndarray
    duration_s: np.ndarray
    tb_moved: np.ndarray
    mean_util: np.ndarray
    labels: list[str] = field(default_factory=list)

    @classmethod
    def from_records(cls, records: RecordSet | Sequence[WorkloadRecord]) -> Features:
        rs = list(records)
        return cls(
            net_energy_j=np.array([r.net_energy_j for r in rs], dtype=float),
            duration_s=np.array([r.duration_s for r in rs], dtype=float),
            tb_moved=np.array([math.nan if r.tb_moved is None else r.tb_moved for r in rs], dtype=float),
            mean_util=np.array([math.nan if r.mean_util is None else r.mean_util for r in rs], dtype=float),
            labels=[r.label for r in rs],
        )

    @classmethod
    def single(
        cls,
        net_energy_j: float,
        duration_s: float,
        tb_moved: float | None = None,
        mean_util: float | None = None,
    ) -> Features:
        return cls(
            net_energy_j=np.array([float(net_energy_j)]),
            duration_s=np.array([float(duration_s)]),
            tb_moved=np.array([math.nan if tb_moved is None else float(tb_moved)]),
            mean_util=np.array([math.nan if mean_util is None else float(mean_util)]),
        )

    def take(self, idx: np.ndarray) -> Features:
        """Fancy-index every column (``idx`` of shape (n,) or (splits, n) gives batched features)."""
        return Features(self.net_energy_j[idx], self.duration_s[idx], self.tb_moved[idx], self.mean_util[idx])

    def __len__(self) -> int:
        return int(self.net_energy_j.shape[-1])

    @property
    def avg_net_power_w(self) -> np.ndarray:
        return self.net_energy_j / self.duration_s


def check_measured(
    records: RecordSet | Sequence[WorkloadRecord], needs: Sequence[str] = (), *, model: str = ""
) -> None:
    """InputError naming file, record and field for the first record an estimator cannot use.

    Records loaded with ``require=()`` (e.g. workload descriptions not yet joined with telemetry) carry NaN
    energy/duration; ``needs`` adds optional columns a model requires (``tb_moved``, ``mean_util``).
    """
    src = records.source if isinstance(records, RecordSet) else None
    for r in records:
        problem: tuple[str, str] | None = None
        if not math.isfinite(r.net_energy_j):
            problem = ("net_energy_j", "is missing (no measured energy for this run)")
        elif r.net_energy_j < 0:
            problem = ("net_energy_j", f"must be >= 0, got {r.net_energy_j:g}")
        elif not math.isfinite(r.duration_s):
            problem = ("duration_s", "is missing (no measured duration for this run)")
        elif r.duration_s <= 0:
            problem = ("duration_s", f"must be > 0, got {r.duration_s:g}")
        else:
            for col in needs:
                if getattr(r, col) is None:
                    problem = (col, f"is unknown; model {model!r} needs it for every record")
                    break
        if problem is not None:
            raise InputError(problem[1], file=src or None, record=r.label, field=problem[0])


def ground_truth(records: RecordSet | Sequence[WorkloadRecord]) -> np.ndarray:
    """Ground-truth FLOPs as an array; InputError naming the record when one is unknown."""
    out = []
    for r in records:
        if r.total_flops is None:
            src = records.source if isinstance(records, RecordSet) else None
            raise InputError(
                "is missing: ground truth is needed to calibrate or evaluate",
                file=src,
                record=r.label,
                field="total_flops",
            )
        out.append(r.total_flops)
    return np.array(out, dtype=float)
