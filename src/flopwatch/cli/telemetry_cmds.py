"""Telemetry commands: ``sensors``, ``record``, ``idle``, ``detect``.

Heavy modules (pandas, pyarrow, vendor libraries) are imported inside the commands.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import typer

from flopwatch.cli import options
from flopwatch.cli._output import console, counted, echo_json, literal, simulated_banner, styled
from flopwatch.errors import InputError


def _open(spec: str, speed: float | None, duration_s: float | None = None) -> list[Any]:
    import time

    from flopwatch.backends import open_sensors

    opts: dict[str, Any] = {"speed": speed}
    if spec.startswith("sim:") and speed is None and duration_s is not None:
        # virtual time runs ahead of the real clock: date the simulated recording so that it ends now
        opts["wall0"] = time.time() - duration_s
    return open_sensors(spec, **opts)


def sensors_cmd(
    as_json: options.Json = False,
    jetson_root: str = typer.Option("/", "--jetson-root", help="sysfs root to probe for Jetson rails."),
    rapl_root: str = typer.Option("/", "--rapl-root", help="sysfs root to probe for RAPL zones."),
) -> None:
    """List the sensors found on this machine. Their capabilities, and why a backend is unavailable."""
    from flopwatch.backends import probe_all

    statuses = probe_all(jetson_root=jetson_root, rapl_root=rapl_root)
    if as_json:
        out = [
            {
                "kind": s.kind,
                "available": s.available,
                "reason": s.reason,
                "sensors": [
                    {
                        "kind": i.kind,
                        "device_id": i.device_id,
                        "name": i.name,
                        "capabilities": list(i.capabilities),
                        "fingerprint": dict(i.fingerprint),
                        "simulated": i.simulated,
                        "spec_key": i.spec_key,
                    }
                    for i in s.sensors
                ],
            }
            for s in statuses
        ]
        echo_json({"backends": out})
        return
    from rich.table import Table

    rows: list[tuple[str, Any, str, str]] = []
    for s in statuses:
        if s.available and s.sensors:
            for i in s.sensors:
                rows.append(
                    (s.kind, styled("found", "green"), f"{i.name}\n{i.device_id}", ", ".join(i.capabilities))
                )
        elif s.available:
            rows.append((s.kind, styled("available", "green"), "", s.reason))
        else:
            rows.append((s.kind, styled("unavailable", "red"), "", s.reason))
    found = any(r[2] for r in rows)  # no device found: no column that is empty in every row
    t = Table(title="flopwatch sensors" + ("" if found else ": no sensor device found on this machine"))
    for c in ("backend", "status", *(("device",) if found else ()), "capabilities / reason"):
        t.add_column(c)
    for kind, status, dev, what in rows:
        t.add_row(kind, status, *((dev,) if found else ()), what)
    console().print(t)


def record_cmd(
    sensor: options.Sensor,
    rate: options.Rate = 10.0,
    duration: float = typer.Option(
        ...,
        "--duration",
        help="Seconds to record (sensor clock).",
        callback=options.duration_s(),
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Parquet trace to write."),
    force: options.Force = False,
    speed: options.ReplaySpeed = None,
    flush_every: float = typer.Option(
        5.0,
        "--flush-every",
        help="Seconds between flushes (what a crash can lose).",
        callback=options.duration_s(le=86400.0),
    ),
    as_json: options.Json = False,
) -> None:
    """Record a trace at a fixed rate, streamed to Parquet. Row groups reach disk as they fill."""
    options.not_inputs(
        [("--output", output)], options.sensor_files(sensor)
    )  # before any work: never overwrite an input
    import time

    from flopwatch.telemetry.sampler import Sampler
    from flopwatch.telemetry.schema import base_metadata
    from flopwatch.telemetry.writer import TraceWriter

    if not rate > 0:
        raise InputError(f"--rate must be > 0, got {rate}", field="rate")
    if not duration > 0:
        raise InputError(f"--duration must be > 0, got {duration}", field="duration")
    options.check_samples(rate, duration)
    from flopwatch.io import check_output

    replayed = [x.split(":", 1)[1] for x in sensor.split(",") if x.startswith("replay:")]
    check_output(output, inputs=replayed, overwrite=force, what="trace", create_parents=True)
    if not (math.isfinite(flush_every) and flush_every > 0):
        raise InputError(f"--flush-every must be a finite number > 0, got {flush_every}", field="flush_every")
    sensors = _open(sensor, speed, duration)
    infos = [s.info() for s in sensors]
    from flopwatch.sensor_timing import check_sampling, sensor_kind_of

    sampler = Sampler(sensors, rate, duration_s=duration, max_buffer=max(100, int(rate * 10)))
    checks = {
        i.device_id: check_sampling(i.spec_key or i.name or i.device_id, sensor_kind_of(i.kind), rate)
        for i in infos
    }
    for dev, chk in checks.items():
        for w in chk.warnings if not chk.adequate else ():
            print(f"warning: {dev}: {w}", file=sys.stderr)
    md = base_metadata(
        kind=infos[0].kind,
        rate_hz=rate,
        fingerprint=dict(infos[0].fingerprint),
        simulated=any(i.simulated for i in infos),
        sensor_spec=sensor,
        devices=[
            {
                "device_id": i.device_id,
                "name": i.name,
                "kind": i.kind,
                "spec_key": i.spec_key,
                "fingerprint": dict(i.fingerprint),
                "capabilities": list(i.capabilities),
            }
            for i in infos
        ],
        t0_monotonic_s=sensors[0].clock.now(),
        jitter=sampler.jitter,
        jitter_seed=sampler.jitter_seed,  # every sample instant can be regenerated (telemetry/sampler.py)
        sampling_checks={d: c.to_dict() for d, c in checks.items()},
    )
    writer = TraceWriter(output, md, flush_every_s=flush_every, overwrite=force)
    sampler.sinks.append(writer)
    interrupted = False
    try:
        if as_json or not sys.stderr.isatty():
            sampler.start()
            while not sampler.wait(0.25):
                pass
        else:
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            with Progress(
                TextColumn("recording", style="bold", markup=False),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                transient=False,
            ) as prog:
                task = prog.add_task("rec", total=duration, info="")
                sampler.start()
                while not sampler.wait(0.25):
                    st = sampler.stats
                    last = [
                        x for x in sampler.latest(len(sensors) * 2) if getattr(x, "power_w", None) is not None
                    ]
                    pw = f"{sum(x.power_w for x in last[-len(sensors) :]):.1f} W" if last else "—"
                    gaps = sum(st.n_gaps.values())
                    prog.update(
                        task,
                        completed=min(duration, sensors[0].clock.now() - (sampler.t0 or 0.0)),
                        info=f"{counted(st.n_ticks, 'tick')}  {pw}  gaps {gaps}",
                    )
                prog.update(task, completed=duration)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        sampler.stop()
        time.sleep(0)
        writer.close()
        for s in sensors:
            s.close()
    st = sampler.stats
    if sampler.exception is not None:
        raise sampler.exception
    summary = {
        "output": str(output),
        "rows": writer.rows_written,
        "row_groups": writer.row_groups,
        "interrupted": interrupted,
        **st.to_dict(),
        "simulated": md["simulated"],
    }
    if as_json:
        echo_json(summary)
        return
    c = console()
    mp = st.mean_period_s
    what = "simulated rows" if md["simulated"] else "rows"
    line = f"wrote {writer.rows_written} {what} to {literal(output)}"
    if mp:
        line += f"; {counted(st.n_ticks, 'tick')}, mean period {mp * 1e3:.2f} ms"
    clk = sensors[0].clock
    if sampler.t0 is not None and st.last_tick_s is not None:
        w0 = clk.wall_time() - clk.now()  # the wall time of t = 0 on the sensors' clock
        span = (time.strftime("%H:%M:%S", time.gmtime(w0 + t)) for t in (sampler.t0, st.last_tick_s))
        line += f"; dated {' – '.join(span)} UTC"
    c.print(line, markup=False, highlight=False)
    if sum(st.n_gaps.values()):
        c.print(f"gaps: {dict(st.n_gaps)}; errors: {dict(st.errors)}", style="yellow")
    c.print(f"ended: {st.end_reason}{' (interrupted)' if interrupted else ''}")


def idle_cmd(
    sensor: options.Sensor,
    duration: float = typer.Option(
        90.0,
        "--duration",
        help="Seconds to measure (the study: 90 s).",
        callback=options.duration_s(),
    ),
    rate: options.Rate = 2.0,  # the study's 2 Hz
    speed: options.ReplaySpeed = None,
    profile: Path | None = typer.Option(
        None, "--profile", help="Compare with this calibration's idle (else the device's spec idle)."
    ),
    strict: bool = typer.Option(False, "--strict", help="Refuse (exit 2) a baseline taken under load."),
    as_json: options.Json = False,
) -> None:
    """Measure the idle power baseline. Median over DURATION seconds, with its spread; flag one taken under load."""
    import numpy as np

    from flopwatch.telemetry.sampler import Sampler
    from flopwatch.telemetry.schema import Reading
    from flopwatch.telemetry.sensors.base import VirtualClock

    if not duration > 0 or not rate > 0:
        raise InputError("--duration and --rate must be > 0", field="duration")
    # an idle baseline is minutes at a few Hz (the study: 90 s at 2 Hz); beyond a day or 1 kHz it is a typo
    if not duration <= 86400:
        raise InputError(f"must be at most 86400 s, got {duration}", field="duration")
    if not rate <= 1000:
        raise InputError(f"must be at most 1000 Hz, got {rate}", field="rate")
    sensors = _open(sensor, speed)
    items: list[Any] = []
    sampler = Sampler(sensors, rate, sinks=[items.append], duration_s=duration)
    try:
        sampler.start()
        sampler.wait()
    finally:
        sampler.stop()
        for s in sensors:
            s.close()
    from flopwatch.estimate.bounds import idle_integrity

    names = {s.info().device_id: s.info().name for s in sensors}
    ref_idle = None
    if profile is not None:
        from flopwatch.estimate.profile import Profile

        ref_idle = Profile.load(profile).idle_power_w
    out: dict[str, Any] = {"duration_s": duration, "rate_hz": rate, "devices": {}}
    for dev in dict.fromkeys(x.device for x in items):
        p = np.array(
            [x.power_w for x in items if isinstance(x, Reading) and x.device == dev and x.power_w is not None]
        )
        n_gaps = sum(1 for x in items if not isinstance(x, Reading) and x.device == dev)
        if p.size == 0:
            out["devices"][dev] = {"n": 0, "n_gaps": n_gaps, "idle_power_w": None}
            continue
        q = np.percentile(p, [5, 25, 75, 95])
        out["devices"][dev] = {
            "idle_power_w": float(np.median(p)),
            "mean_w": float(p.mean()),
            "std_w": float(p.std(ddof=1)) if p.size > 1 else 0.0,
            "iqr_w": float(q[2] - q[1]),
            "p5_w": float(q[0]),
            "p95_w": float(q[3]),
            "n": int(p.size),
            "n_gaps": n_gaps,
        }
        # integrity (flopwatch.estimate.bounds.check_idle_baseline): util, clocks, power vs a reference idle
        out["devices"][dev]["integrity"] = idle_integrity(
            [x for x in items if isinstance(x, Reading) and x.device == dev],
            float(np.median(p)),
            names.get(dev),
            ref_idle,
        )
    out["simulated"] = any(s.info().simulated for s in sensors)
    flagged = {
        d: v["integrity"]["reasons"]
        for d, v in out["devices"].items()
        if not v.get("integrity", {}).get("ok", True)
    }
    if strict and flagged:
        dev, why = next(iter(flagged.items()))
        raise InputError(f"baseline refused: {'; '.join(why)}", record=dev, field="idle_power_w")
    if as_json:
        echo_json(out)
        return
    from rich.table import Table

    con = console()
    virtual = any(isinstance(s.clock, VirtualClock) for s in sensors)
    if out["simulated"]:
        simulated_banner(con, "the simulated device's idle power, not a measurement")
    what = "simulated s" if virtual and out["simulated"] else ("s of trace time" if virtual else "s")
    t = Table(title=f"idle baseline ({duration:g} {what} at {rate:g} Hz)")
    for c in ("device", "median W", "IQR W", "p5–p95 W", "samples", "gaps"):
        t.add_column(c)
    for dev, d in out["devices"].items():
        if d["idle_power_w"] is None:
            t.add_row(dev, "—", "—", "—", "0", str(d["n_gaps"]))
        else:
            t.add_row(
                dev,
                f"{d['idle_power_w']:.3f}",
                f"{d['iqr_w']:.3f}",
                f"{d['p5_w']:.3f}–{d['p95_w']:.3f}",
                str(d["n"]),
                str(d["n_gaps"]),
            )
    con.print(t)
    for dev, why in flagged.items():
        for w in why:
            con.print(f"warning: {dev}: {w}")


def detect_cmd(
    trace: Path = typer.Argument(..., help="Trace: flopwatch Parquet or the seed's timeseries.json."),
    as_json: options.Json = False,
    poll: float = typer.Option(
        1.5,
        "--poll",
        help="Poll interval in seconds (study: 1.5).",
        callback=options.poll_s(),
    ),
    util_threshold: float = typer.Option(
        0.05,
        "--util-threshold",
        help="Busy above this utilisation (0–1).",
        callback=options.finite(ge=0.0, lt=1.0),
    ),
    start_polls: int = typer.Option(
        2,
        "--start-polls",
        help="Consecutive busy polls that start a workload.",
        callback=options.count(ge=1),
    ),
    end_polls: int = typer.Option(
        3,
        "--end-polls",
        help="Consecutive idle polls that end a workload.",
        callback=options.count(ge=1),
    ),
    edges: str = typer.Option("outer", "--edges", help="outer (never cut workload energy) or inner."),
    idle_power: options.IdlePower = None,
    device: options.TraceDevice = None,
) -> None:
    """Detect workloads in a trace and integrate their energy. The study's utilisation hysteresis."""
    from flopwatch.detect import HysteresisParams, detect_workloads

    params = HysteresisParams(
        poll_s=poll,
        util_threshold=util_threshold,
        start_polls=start_polls,
        end_polls=end_polls,
        edges=edges,  # type: ignore[arg-type]
    )
    det = detect_workloads(trace, params, idle_power_w=idle_power, device=device)  # streams the file
    if as_json:
        echo_json(det.to_dict())
        return
    from rich.table import Table

    c = console()
    c.print(
        f"{trace}: {len(det.segments)} workload(s); idle {det.idle_power_w:.3f} W ({det.idle_source})", end=""
    )
    if det.simulated:
        c.print(styled(" (SIMULATED)", "bold red"), end="")
    c.print()
    if det.skipped_devices:
        c.print(f"not segmented (no utilisation series): {', '.join(det.skipped_devices)}", style="yellow")
    for w in det.warnings:  # physically impossible telemetry on a device (blocks "below" downstream)
        c.print(f"warning: {w}", style="yellow")
    if not det.segments:
        return
    multi = len({s.device for s in det.segments}) > 1
    if not multi:
        c.print(f"device: {det.segments[0].device}")
    t = Table()
    cols = [
        "#",
        *(["device"] if multi else []),
        "start s",
        "end s",
        "dur s",
        "energy J",
        "net J",
        "util",
        "cover",
        "TB",
    ]
    for col in cols:
        t.add_column(col, justify="right")
    for i, s in enumerate(det.segments):
        t.add_row(
            str(i),
            *([s.device] if multi else []),
            f"{s.start_s:.1f}",
            f"{s.end_s:.1f}" + ("" if s.complete else "…"),
            f"{s.duration_s:.1f}",
            f"{s.energy_j:.1f}",
            f"{s.net_energy_j:.1f}",
            "—" if s.mean_util is None else f"{s.mean_util:.1%}",
            f"{s.coverage:.0%}",
            "—" if s.tb_moved is None else f"{s.tb_moved:.4f}",
        )
    c.print(t)
    for i, s in enumerate(det.segments):
        for w in s.warnings:
            if w not in det.warnings:
                c.print(f"warning: workload {i}: {w}", style="yellow")


def register(app: typer.Typer) -> None:
    """Add this area's commands to ``app``."""
    app.command("sensors")(sensors_cmd)
    app.command("record")(record_cmd)
    app.command("idle")(idle_cmd)
    app.command("detect")(detect_cmd)
