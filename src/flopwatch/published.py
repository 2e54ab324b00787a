"""Is this the published study data? sha256 of the two studies' files, pinned and from their SOURCE.md.

Tests that reproduce published numbers and ``flopwatch redteam`` read the data in ``shared/data`` (or the
package's bundled MASCOTS copies); a copy whose ground truth was edited would make them report on something
else. :func:`published_data_problem` says when a file is not the published data (issue 25). :func:`seed_context`
says how the Jetson study's records were observed (its sensor and rate), which the records loader attaches.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flopwatch.errors import InputError
from flopwatch.io import read_bytes, read_text
from flopwatch.units import finite

#: How the Jetson study's records were observed (data/jetson_flop_estimator/SOURCE.md, "Formats"; Fowler 2026):
#: the Orin Nano's VDD_CPU_GPU_CV rail, an INA3221 channel (telemetry/sensors/jetson.py), read at 2 Hz —
#: ``n_power_samples`` ÷ ``duration_s`` is 1.993–2.001 Hz over the 38 v2 records. ``records.load_records`` gives
#: every record of that format this context (:func:`seed_context`), so ``estimate``, ``redteam`` and the benches
#: judge it as that sensor through the sensor-timing table (a 1.1 ms point reading, no energy counter), never as
#: "no sensor recorded"; what the file itself claims of its sensor or rate is replaced.
SEED_SENSOR_KIND = "ina3221"
SEED_SENSOR_SPEC = "jetson:VDD_CPU_GPU_CV"
SEED_RATE_HZ = 2.0

#: sha256 of the published study data as copied to ``shared/data`` (taken 2026-12-01 from the copies, and equal
#: to the hashes their ``SOURCE.md`` records): keyed by the path under the data root. A copy whose hash differs
#: (edited ground truth, a swapped file) is not the published data, whatever its SOURCE.md says.
PUBLISHED_SHA256: dict[str, str] = {
    "jetson_flop_estimator/eval_results_v2_records.json": (
        "e7f21fc442f0bf81cdfe21a5078ebf8acfab68b3dbbc0bec95e978977c453673"
    ),
    "jetson_flop_estimator/writeup/timeseries.json": (
        "90c76152d06b1143b8e406e9cfaf7d890629026e61f6cb8e7ff1f55ebce7f4a2"
    ),
    **{
        f"gpu_power_benchmark/aggregation_results/mfu_aggregated_per_config_{gpu}.csv": h
        for gpu, h in (
            ("A100", "7d266850cee5d2d96be86f4d1f73704cf5727e7db9eb0682a127026df9bc7b29"),
            ("L40", "d972e6a20d0686bea78410a96728aa282097b5a5ccc9d7defadbe13becdc7dc2"),
            ("L4", "b1b240fcd904cc1fef8ad92ccc3e243ce45d26a54e417f1311fe8af61bd02967"),
            ("GPU06", "24cdce3126382f44e3cc85a0435caf641525893e66bcb26a734a996ac484da27"),
            ("4070", "fe519ba8114d83e9e949b14aa4a2d0e6edaebe9e4659a24dd9f5383552e32022"),
            ("MI210", "d0b6e4d8bec34a31a1b5e649dce2f865f30abd009136036e006d5fa779dbedbb"),
        )
    },
}


def _source_md_hashes(path: Path) -> tuple[Path | None, dict[str, str]]:
    """The SOURCE.md of the dataset folder holding ``path`` (nearest ancestor that has one) and the sha256 it
    records for each file, keyed by the file's path relative to that folder."""
    for d in path.parents:
        src = d / "SOURCE.md"
        if src.is_file():
            out: dict[str, str] = {}
            with contextlib.suppress(InputError):
                for line in read_text(src).splitlines():
                    cells = [c.strip() for c in line.strip().strip("|").split("|")]
                    sha = next((c for c in cells if re.fullmatch(r"[0-9a-f]{64}", c)), None)
                    if sha is not None and cells and cells[0]:
                        out[cells[0]] = sha
            return src, out
    return None, {}


def published_data_problem(path: str | os.PathLike[str]) -> str | None:
    """Why the file at ``path`` is not the published study data it claims to be (its sha256 differs from the
    hash recorded in :data:`PUBLISHED_SHA256` or in its folder's SOURCE.md), or None when it matches."""
    p = Path(path)
    try:
        digest = hashlib.sha256(read_bytes(p)).hexdigest()
    except InputError as e:
        return str(e)
    problems: list[str] = []
    src, recorded = _source_md_hashes(p)
    if src is not None:
        rel = p.relative_to(src.parent).as_posix()
        want = recorded.get(rel)
        if want is not None and want != digest:
            problems.append(f"its SOURCE.md records {want[:12]}…")
        key = f"{src.parent.name}/{rel}"
    else:
        key = "/".join(p.parts[-3:]) if "aggregation_results" in p.parts else "/".join(p.parts[-2:])
    pinned = next((h for k, h in PUBLISHED_SHA256.items() if k == key or k.endswith("/" + key)), None)
    if pinned is None:  # a copy elsewhere (the package's bundled MASCOTS CSVs): the file names are unique
        pinned = next((h for k, h in PUBLISHED_SHA256.items() if k.rsplit("/", 1)[-1] == p.name), None)
    if pinned is not None and pinned != digest:
        problems.append(f"flopwatch recorded {pinned[:12]}… on 2026-12-01")
    if not problems:
        return None
    return f"{p}: sha256 {digest[:12]}… is not the published data ({'; '.join(problems)})"


__all__ = ["PUBLISHED_SHA256", "published_data_problem"]


def seed_context(record: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded context (``estimate.observe.CONTEXT_KEYS``) of one Jetson-study record (the file's mapping or
    a ``WorkloadRecord``): its sensor and the rate it was read at (the record's own ``n_power_samples`` over its
    ``duration_s``; :data:`SEED_RATE_HZ`, the rate SOURCE.md documents, where it has no positive count)."""
    n, t = finite(record.get("n_power_samples")), finite(record.get("duration_s"))
    rate = n / t if n is not None and n > 0 and t is not None and t > 0 else SEED_RATE_HZ
    return {"sensor_kind": SEED_SENSOR_KIND, "sensor_spec": SEED_SENSOR_SPEC, "sample_rate_hz": rate}
