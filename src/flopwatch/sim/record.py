"""Record the telemetry of a scripted schedule played on a simulated device (``flopwatch sim trace``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flopwatch.errors import InputError
from flopwatch.records import append_record
from flopwatch.sim.sensor import from_spec
from flopwatch.telemetry.sampler import Sampler
from flopwatch.telemetry.schema import base_metadata
from flopwatch.telemetry.writer import TraceWriter


@dataclass(frozen=True)
class ScheduleRecording:
    """What :func:`record_schedule` wrote."""

    device_name: str
    n_samples: int
    duration_s: float  # virtual seconds
    n_records: int


#: Most trace rows one simulated recording writes (as ``flopwatch.cli.options.MAX_SAMPLES`` for ``record``).
MAX_TRACE_SAMPLES = 1e8


def record_schedule(
    device: str,
    schedule: Path,
    out: Path,
    *,
    rate_hz: float = 10.0,
    seed: int = 0,
    power_cap_w: float | None = None,
    locked_clock_mhz: float | None = None,
    tail_s: float = 10.0,
    records: Path | None = None,
    overwrite: bool = False,
) -> ScheduleRecording:
    """Play ``schedule`` on simulated ``device``, write its trace to ``out`` (Parquet, labelled simulated) and,
    with ``records``, append each run's ground-truth record there."""
    import math

    from flopwatch.io import check_output

    # bounds: a sampling rate beyond 10 kHz or a tail beyond a day is a typo that would run for hours
    if not (rate_hz > 0 and rate_hz <= 1e4):
        raise InputError(f"must be > 0 and <= 10000 Hz, got {rate_hz}", field="rate")
    if not (math.isfinite(tail_s) and 0 <= tail_s <= 86400):
        raise InputError(f"must be between 0 and 86400 s, got {tail_s}", field="tail_s")
    for name, v in (("power_cap_w", power_cap_w), ("locked_clock_mhz", locked_clock_mhz)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise InputError(f"must be a finite number > 0, got {v}", field=name)
    check_output(out, inputs=(schedule, records), overwrite=overwrite, what="trace", create_parents=True)
    if records is not None:
        check_output(
            records,
            inputs=(schedule,),
            overwrite=True,
            what="records",
            option="--records",
            create_parents=True,
        )
    sensors = from_spec(
        device, seed=seed, schedule=schedule, power_cap_w=power_cap_w, locked_clock_mhz=locked_clock_mhz
    )
    info = sensors[0].info()
    end = max(s.accelerator.end_s for s in sensors) + max(0.0, tail_s)
    # The trace's size is schedule length × rate × devices: bounded as `record`'s is (1e8 rows ≈ 10 GB).
    n = end * rate_hz * len(sensors)
    if not n <= MAX_TRACE_SAMPLES:
        raise InputError(
            f"{end:.6g} s at {rate_hz:g} Hz on {len(sensors)} device(s) is {n:.3g} samples "
            f"(limit {MAX_TRACE_SAMPLES:.0e}); shorten the schedule or lower --rate",
            file=str(schedule),
        )
    md = base_metadata(
        kind="sim", rate_hz=rate_hz, fingerprint=dict(info.fingerprint), simulated=True, source=str(schedule)
    )
    with TraceWriter(out, md, overwrite=overwrite) as w:
        stats = Sampler(sensors, rate_hz, sinks=[w], duration_s=end).run()
    n_runs = 0
    if records is not None:
        for s in sensors:
            for r in s.accelerator.runs:
                append_record(records, r.record())
                n_runs += 1
    return ScheduleRecording(
        device_name=info.name, n_samples=sum(stats.n_samples.values()), duration_s=end, n_records=n_runs
    )
