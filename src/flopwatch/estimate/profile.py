"""Calibration profiles: a fitted estimator, its residuals and provenance, as versioned JSON.

Schema ``flopwatch.profile/1`` (all keys written, unknown extra keys ignored on load)::

    schema, created (ISO-8601 UTC), flopwatch_version,
    model (registry name, e.g. "default"), component (concrete model chosen, e.g. "loglin-p-bw"),
    model_hyper (constructor arguments), params (fitted numbers), hyper (chosen inside the fit),
    idle_power_w, fingerprint (device, nullable),
    confidence, interval {method, log_halfwidth, residuals_log_ratio},
    training {source, n, labels, dtype, filters {min_util, precision, excluded …}, ranges},
    diagnostics {loo_mae_pct, insample_mae_pct, loo_max_abs_pct},
    verifier {version, device, regime {observable: [low, high]}, efficiency {flops_per_j {dtype: best},
              n_runs {dtype: n}}, idle_power_w, idle_drift_w}   (optional; added 2026-11-30)

The ``verifier`` block (its own ``version``, currently :data:`VERIFIER_VERSION`) feeds the regime check and
the sound bounds of :mod:`flopwatch.estimate.verdict`. Profiles written before it existed still load: the
regime then falls back to ``training.ranges.avg_net_power_w`` and the efficiency envelope is unbounded.

A profile that is not JSON, not an object, of another schema/version, missing a field, or holding a
non-finite number is a :class:`ProfileError` naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from flopwatch.devices import normalize_dtype
from flopwatch.errors import InputError, ProfileError
from flopwatch.estimate.bounds import MIN_COVERAGE  # the one coverage threshold; below it an estimate warns
from flopwatch.estimate.features import Features
from flopwatch.estimate.intervals import Estimate, check_confidence, log_halfwidth
from flopwatch.estimate.models import FlopModel, get_model
from flopwatch.io import atomic_write, is_out_of_range, parse_json, read_text
from flopwatch.records import RecordSet, WorkloadRecord
from flopwatch.units import finite

PROFILE_SCHEMA = "flopwatch.profile/1"
_REQUIRED = ("schema", "model", "params", "confidence", "interval", "training", "created")
# Bound on log-ratio widths and residuals: e^50 ≈ 5e21 is already meaningless as an error factor, and it keeps
# exp() of any interval width (even recomputed at another confidence) far from float overflow (e^709).
MAX_LOG_RATIO = 50.0
VERIFIER_VERSION = 1


def _show(x: Any) -> str:
    """A value for an error message: the file's literal for a number too large for a float."""
    lit = is_out_of_range(x)
    return f"{lit} (too large for a 64-bit float)" if lit is not None else repr(x)


class Profile:
    """A calibrated estimator. Build with :func:`flopwatch.estimate.calibration.calibrate` or :meth:`load`."""

    def __init__(self, data: Mapping[str, Any], *, source: str | None = None) -> None:
        if not isinstance(data, Mapping):
            raise ProfileError(f"must be a JSON object, got {type(data).__name__}", file=source)
        self._data = _validate(dict(data), source)
        self.source = source
        self._model: FlopModel = get_model(self._data["model"])
        try:
            self._model.check_params(self.params)
        except InputError as e:
            raise ProfileError(e.detail, file=source, field=f"params.{e.field}") from None
        # Probe once so an incompatible parameter set fails at load time, naming the field.
        try:
            probe = self._predict(np.array([1000.0]), np.array([100.0]), np.array([0.1]), np.array([0.95]))
        except KeyError as e:
            raise ProfileError(
                f"missing parameter {e.args[0]!r} for model {self.model_name!r}", file=source, field="params"
            ) from None
        if probe.shape != (1,):
            raise ProfileError("parameters do not fit the model", file=source, field="params")

    # ------------------------------------------------------------------ contract attributes
    @property
    def model_name(self) -> str:
        return str(self._data["model"])

    @property
    def component(self) -> str:
        return str(self._data.get("component") or self.model_name)

    @property
    def params(self) -> dict[str, float]:
        return dict(self._data["params"])

    @property
    def idle_power_w(self) -> float | None:
        return self._data.get("idle_power_w")

    @property
    def confidence(self) -> float:
        return float(self._data["confidence"])

    @property
    def fingerprint(self) -> dict[str, Any]:
        return dict(self._data.get("fingerprint") or {})

    @property
    def training(self) -> dict[str, Any]:
        return dict(self._data["training"])

    @property
    def residuals(self) -> np.ndarray:
        """LOO log-ratio residuals log(F/F̂₋ᵢ) of the calibration records."""
        return np.asarray(self._data["interval"]["residuals_log_ratio"], dtype=float)

    @property
    def dtype(self) -> str:
        return str(self._data["training"].get("dtype") or "fp32")

    @property
    def verifier(self) -> dict[str, Any]:
        """The verifier block (regime ranges, measured efficiency, idle), {} for older profiles."""
        return dict(self._data.get("verifier") or {})

    @property
    def regime_ranges(self) -> dict[str, list[float]]:
        """Observed [low, high] of every regime observable in the calibration runs.

        Older profiles carry only the net-power range (``training.ranges.avg_net_power_w``)."""
        reg = self.verifier.get("regime")
        if isinstance(reg, dict):
            return {k: list(v) for k, v in reg.items()}
        rng = (self.training.get("ranges") or {}).get("avg_net_power_w")
        return {"net_power_w": list(rng)} if rng else {}

    @property
    def efficiency(self) -> dict[str, float]:
        """Best FLOP per net joule measured per precision in the calibration file ({} when unknown)."""
        eff = (self.verifier.get("efficiency") or {}).get("flops_per_j") or {}
        return {str(k): float(v) for k, v in eff.items()}

    @property
    def device_key(self) -> str | None:
        d = self.verifier.get("device")
        return str(d) if d else None

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._data))

    def __repr__(self) -> str:
        return (
            f"Profile(model={self.model_name!r}, component={self.component!r}, n={self.training.get('n')}, "
            f"confidence={self.confidence})"
        )

    # ------------------------------------------------------------------ estimation
    def _predict(self, E: np.ndarray, t: np.ndarray, tb: np.ndarray, u: np.ndarray) -> np.ndarray:
        X = Features(E, t, tb, u)
        return self._model.predict_params({k: np.asarray(v, dtype=float) for k, v in self.params.items()}, X)

    def estimate(
        self,
        net_energy_j: float,
        duration_s: float,
        *,
        tb_moved: float | None = None,
        mean_util: float | None = None,
        dtype: str = "fp32",
        confidence: float | None = None,
        label: str | None = None,
    ) -> Estimate:
        """FLOP estimate with interval for one workload. InputError for bad numbers or missing features."""
        rec = label
        for name, v, strictly in (("net_energy_j", net_energy_j, False), ("duration_s", duration_s, True)):
            if finite(v) is None or v < 0 or (strictly and v == 0):
                raise InputError(
                    f"must be a finite number {'>' if strictly else '>='} 0, got {v!r}",
                    record=rec,
                    field=name,
                )
        for name, opt in (("tb_moved", tb_moved), ("mean_util", mean_util)):
            if opt is not None and (finite(opt) is None or opt < 0):
                raise InputError(f"must be a finite number >= 0, got {opt!r}", record=rec, field=name)
        want = normalize_dtype(dtype)
        trained = self.dtype
        if trained != "all" and want != trained:
            raise ProfileError(
                f"profile was calibrated on {trained} runs; this workload is {want} (J/FLOP differs several-fold "
                "between precisions; calibrate on matching runs)",
                file=self.source,
                record=rec,
                field="dtype",
            )
        comp = self._model.component(self.params)
        for col, val in (("tb_moved", tb_moved), ("mean_util", mean_util)):
            if col in comp.needs and val is None:
                raise InputError(
                    f"model {comp.name!r} needs {col}; it is unknown for this workload", record=rec, field=col
                )
        conf = self.confidence if confidence is None else check_confidence(confidence)
        flops = float(
            self._predict(
                np.array([float(net_energy_j)]),
                np.array([float(duration_s)]),
                np.array([math.nan if tb_moved is None else float(tb_moved)]),
                np.array([math.nan if mean_util is None else float(mean_util)]),
            )[0]
        )
        if conf == self.confidence:
            q = float(self._data["interval"]["log_halfwidth"])
            method = str(self._data["interval"]["method"])
        else:
            # a profile calibrated with Student-t intervals keeps them; otherwise conformal where n allows
            stored = self._data["interval"]["method"]
            qa, used = log_halfwidth(self.residuals, conf, "student-t" if stored == "student-t" else "auto")
            q, method = float(qa), str(used)
        warnings = self._warnings(net_energy_j / duration_s, mean_util)
        if net_energy_j == 0:
            # Nothing above idle: every model's answer is "no measurable compute" (log models would give 0·∞).
            flops = 0.0
            warnings.append("no net energy above idle: no measurable compute")
        elif not math.isfinite(flops):
            zero_tb = tb_moved == 0 and "tb_moved" in comp.needs
            raise InputError(
                f"model {comp.name!r} gives no finite estimate for these inputs"
                + (" (it uses log DRAM bandwidth, so tb_moved must be > 0)" if zero_tb else ""),
                record=rec,
                field="tb_moved" if zero_tb else None,
            )
        elif flops <= 0:
            warnings.append(
                "estimate is not positive: the workload's net power is below the model's overhead"
            )
        # a non-positive estimate (power below the model's overhead, warned above) scales the other way:
        # keep lower <= flops <= upper
        a, b = flops * math.exp(-q), flops * math.exp(q)
        return Estimate(
            flops=flops,
            lower_flops=min(a, b),
            upper_flops=max(a, b),
            confidence=conf,
            model=self.model_name,
            interval_method=method,
            warnings=tuple(warnings),
        )

    def _warnings(self, power_w: float, mean_util: float | None) -> list[str]:
        out = []
        rng = self.training.get("ranges", {}).get("avg_net_power_w")
        if rng and not (rng[0] * 0.95 <= power_w <= rng[1] * 1.05):
            out.append(
                f"net power {power_w:.3g} W outside the calibration range {rng[0]:.3g}–{rng[1]:.3g} W "
                "(extrapolation)"
            )
        gate = self.training.get("filters", {}).get("min_util", 0.0) or 0.0
        if mean_util is not None and mean_util < gate:
            out.append(f"mean utilisation {mean_util:.0%} below the calibration gate {gate:.0%}")
        return out

    def estimate_record(self, record: WorkloadRecord, *, confidence: float | None = None) -> Estimate:
        est = self.estimate(
            record.net_energy_j,
            record.duration_s,
            tb_moved=record.tb_moved,
            mean_util=record.mean_util,
            dtype=record.dtype,
            confidence=confidence,
            label=record.label,
        )
        # coverage (0–1, validated by load_records): share of the run with telemetry samples no further apart
        # than the gap tolerance; below it the energy was bridged over sensor gaps, so say so.
        cov = record.raw.get("coverage")
        if isinstance(cov, (int, float)) and not isinstance(cov, bool) and cov < MIN_COVERAGE:
            note = f"telemetry covers only {cov:.0%} of the run: its energy is partly interpolated over gaps"
            est = dataclasses.replace(est, warnings=(*est.warnings, note))
        return est

    def estimate_records(
        self, records: RecordSet | Sequence[WorkloadRecord], *, confidence: float | None = None
    ) -> list[Estimate]:
        """Estimate every record (errors name the file and record)."""
        src = records.source if isinstance(records, RecordSet) else None
        out = []
        for r in records:
            try:
                out.append(self.estimate_record(r, confidence=confidence))
            except InputError as e:
                raise type(e)(
                    e.detail,
                    file=src if e.file is None or e.file == self.source else e.file,
                    record=r.label,
                    field=e.field,
                ) from None
        return out

    def check_fingerprint(self, fingerprint: Mapping[str, Any] | None, *, file: str | None = None) -> None:
        """ProfileError when both fingerprints name a device model and they differ."""
        mine = self.fingerprint
        if not fingerprint or not mine:
            return
        for key in ("device", "model", "device_name", "name"):
            a, b = mine.get(key), fingerprint.get(key)
            if a and b and str(a) != str(b):
                raise ProfileError(
                    f"profile is for device {a!r} but the records come from {b!r}",
                    file=file or self.source,
                    field=f"fingerprint.{key}",
                )

    # ------------------------------------------------------------------ I/O
    def canonical_json(self) -> str:
        return json.dumps(self._data, sort_keys=True, separators=(",", ":"), allow_nan=False)

    def sha256(self) -> str:
        """SHA-256 of the canonical JSON (sorted keys, no whitespace): identifies the calibration in ledgers."""
        return hashlib.sha256(self.canonical_json().encode("utf-8")).hexdigest()

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically (temp file + rename): an existing profile is never left half-written."""
        text = json.dumps(self._data, indent=2, sort_keys=False, allow_nan=False) + "\n"
        # flopwatch.io.atomic_write: temp file in the same directory, fsync, rename; keeps the mode of the
        # profile being replaced, else rw-r--r-- (a profile is shared with the monitor and other users).
        p = atomic_write(path, text)
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Profile:
        file = str(path)
        text = read_text(path, kind="profile JSON file", error=ProfileError)
        if not text.strip():
            raise ProfileError("is empty (expected a JSON profile)", file=file)
        data = parse_json(text, file=file, error=ProfileError)
        return cls(data, source=file)


def _validate(d: dict[str, Any], file: str | None) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise ProfileError(f"must be a JSON object, got {type(d).__name__}", file=file)
    schema = d.get("schema")
    if schema is None:
        raise ProfileError("is missing: not a flopwatch profile", file=file, field="schema")
    if not isinstance(schema, str) or not schema.startswith("flopwatch.profile/"):
        raise ProfileError(
            f"{schema!r} is not a flopwatch profile (expected {PROFILE_SCHEMA!r})", file=file, field="schema"
        )
    if schema != PROFILE_SCHEMA:
        raise ProfileError(
            f"unsupported profile version {schema!r}; this flopwatch reads {PROFILE_SCHEMA!r}",
            file=file,
            field="schema",
        )
    for key in _REQUIRED:
        if key not in d:
            raise ProfileError("is missing", file=file, field=key)
    if not isinstance(d["model"], str):
        raise ProfileError("must be a string", file=file, field="model")
    try:
        get_model(d["model"])
    except InputError as e:
        raise ProfileError(e.detail, file=file, field="model") from None
    params = d["params"]
    if not isinstance(params, dict) or not params:
        raise ProfileError("must be a non-empty object of numbers", file=file, field="params")
    for k, v in params.items():
        if finite(v) is None:
            raise ProfileError(f"must be a finite number, got {_show(v)}", file=file, field=f"params.{k}")
    try:
        check_confidence(d["confidence"])
    except InputError as e:
        raise ProfileError(e.detail, file=file, field="confidence") from None
    iv = d["interval"]
    if not isinstance(iv, dict):
        raise ProfileError("must be an object", file=file, field="interval")
    for key in ("method", "log_halfwidth", "residuals_log_ratio"):
        if key not in iv:
            raise ProfileError("is missing", file=file, field=f"interval.{key}")
    if finite(iv["log_halfwidth"]) is None or not 0 < iv["log_halfwidth"] <= MAX_LOG_RATIO:
        # zero width would claim an exact estimate: no calibration on measured energy supports that
        raise ProfileError(
            f"must be a number in (0, {MAX_LOG_RATIO:g}] (a zero-width interval is not a calibration, "
            f"one wider than a factor e^{MAX_LOG_RATIO:g} is no estimate), "
            f"got {_show(iv['log_halfwidth'])}",
            file=file,
            field="interval.log_halfwidth",
        )
    if not isinstance(iv["method"], str):
        raise ProfileError("must be a string", file=file, field="interval.method")
    res = iv["residuals_log_ratio"]
    if not isinstance(res, list) or len(res) < 2 or not all((finite(x) is not None) for x in res):
        raise ProfileError(
            "must be a list of at least 2 finite numbers", file=file, field="interval.residuals_log_ratio"
        )
    if max(abs(x) for x in res) > MAX_LOG_RATIO:
        raise ProfileError(
            f"holds a log-ratio beyond ±{MAX_LOG_RATIO:g} (an estimate off by more than e^{MAX_LOG_RATIO:g}): "
            "not a usable calibration",
            file=file,
            field="interval.residuals_log_ratio",
        )
    tr = d["training"]
    if not isinstance(tr, dict):
        raise ProfileError("must be an object", file=file, field="training")
    if "dtype" in tr and tr["dtype"] != "all":
        try:
            normalize_dtype(tr["dtype"])
        except InputError as e:
            raise ProfileError(e.detail, file=file, field="training.dtype") from None
    # Parts of the training description that estimation reads (range and gate warnings).
    ranges = tr.get("ranges")
    if ranges is not None:
        if not isinstance(ranges, dict):
            raise ProfileError("must be an object", file=file, field="training.ranges")
        for key, rng in ranges.items():
            if not (isinstance(rng, list) and len(rng) == 2 and all((finite(x) is not None) for x in rng)):
                raise ProfileError(
                    f"must be a [low, high] pair of finite numbers, got {_show(rng)}",
                    file=file,
                    field=f"training.ranges.{key}",
                )
            if rng[0] > rng[1]:
                raise ProfileError(
                    f"is inverted: low {rng[0]!r} > high {rng[1]!r}",
                    file=file,
                    field=f"training.ranges.{key}",
                )
    filters = tr.get("filters")
    if filters is not None:
        if not isinstance(filters, dict):
            raise ProfileError("must be an object", file=file, field="training.filters")
        mu = filters.get("min_util")
        if mu is not None and not ((finite(mu) is not None) and 0.0 <= mu <= 1.0):
            raise ProfileError(
                f"must be a number between 0 and 1, got {mu!r}", file=file, field="training.filters.min_util"
            )
    idle = d.get("idle_power_w")
    if idle is not None and (finite(idle) is None or idle < 0):
        raise ProfileError(
            f"must be a finite number >= 0 or null, got {idle!r}", file=file, field="idle_power_w"
        )
    fp = d.get("fingerprint")
    if fp is not None and not isinstance(fp, dict):
        raise ProfileError("must be an object or null", file=file, field="fingerprint")
    diag = d.get("diagnostics")
    if diag is not None:
        if not isinstance(diag, dict):
            raise ProfileError("must be an object", file=file, field="diagnostics")
        for key, v in diag.items():
            # error percentages: a non-finite or negative one is a corrupt (or degenerate) calibration
            if key.endswith("_pct") and v is not None and not ((finite(v) is not None) and v >= 0):
                raise ProfileError(
                    f"must be a finite number >= 0 or null, got {_show(v)}",
                    file=file,
                    field=f"diagnostics.{key}",
                )
    _validate_verifier(d.get("verifier"), file)
    return d


def _validate_verifier(v: Any, file: str | None) -> None:
    if v is None:
        return
    if not isinstance(v, dict):
        raise ProfileError("must be an object", file=file, field="verifier")
    ver = v.get("version")
    if not (isinstance(ver, int) and not isinstance(ver, bool) and 1 <= ver <= VERIFIER_VERSION):
        raise ProfileError(
            f"unsupported verifier block version {ver!r}; this flopwatch reads 1–{VERIFIER_VERSION}",
            file=file,
            field="verifier.version",
        )
    dev = v.get("device")
    if dev is not None and not isinstance(dev, str):
        raise ProfileError("must be a device key or null", file=file, field="verifier.device")
    reg = v.get("regime", {})
    if not isinstance(reg, dict):
        raise ProfileError("must be an object", file=file, field="verifier.regime")
    for key, rng in reg.items():
        if not (
            isinstance(rng, list)
            and len(rng) == 2
            and all((finite(x) is not None) for x in rng)
            and rng[0] <= rng[1]
        ):
            raise ProfileError(
                f"must be a [low, high] pair of finite numbers, got {rng!r}",
                file=file,
                field=f"verifier.regime.{key}",
            )
    eff_block = v.get("efficiency") or {}
    if not isinstance(eff_block, dict):
        raise ProfileError("must be an object", file=file, field="verifier.efficiency")
    eff = eff_block.get("flops_per_j", {})
    if not isinstance(eff, dict):
        raise ProfileError("must be an object", file=file, field="verifier.efficiency.flops_per_j")
    for key, x in eff.items():
        if not ((finite(x) is not None) and x > 0):
            raise ProfileError(
                f"must be a positive finite number, got {x!r}",
                file=file,
                field=f"verifier.efficiency.flops_per_j.{key}",
            )
    for key in ("idle_power_w", "idle_drift_w"):
        x = v.get(key)
        if x is not None and not ((finite(x) is not None) and x >= 0):
            raise ProfileError(
                f"must be a finite number >= 0 or null, got {x!r}", file=file, field=f"verifier.{key}"
            )
