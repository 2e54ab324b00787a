"""Sampling that cannot be phase-locked (issue 21 item 4): seeded random instants, mean rate unchanged, no drift;
and the sensor-timing table that says whether a rate is enough for a sensor."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from flopwatch.errors import InputError
from flopwatch.sensor_timing import TABLE, check_sampling, sensor_kind_of, sensor_timing
from flopwatch.telemetry.sampler import Sampler, sample_instants
from flopwatch.telemetry.schema import Reading
from flopwatch.telemetry.sensors.base import MonotonicClock, SensorInfo, VirtualClock


class Probe:
    """Records the instant of every read on a virtual clock."""

    def __init__(self, clock: VirtualClock, kind: str = "fake") -> None:
        self._clock, self.kind, self.t = clock, kind, []

    @property
    def clock(self) -> VirtualClock:
        return self._clock

    def info(self) -> SensorInfo:
        return SensorInfo(kind=self.kind, device_id="p0", name="probe", capabilities=("power_w",))

    def read(self) -> Reading:
        t = self._clock.now()
        self.t.append(t)
        return Reading(t, self._clock.wall_time(), "p0", 1.0)

    def close(self) -> None:
        pass


def _instants(rate: float, dur: float, seed: int, **kw) -> tuple[np.ndarray, Sampler]:
    p = Probe(VirtualClock())
    s = Sampler([p], rate, duration_s=dur, jitter_seed=seed, **kw)
    s.run()
    return np.array(p.t), s


def test_every_instant_is_random_within_its_own_period_and_the_rate_is_kept():
    t, s = _instants(10.0, 100.0, seed=7)
    assert len(t) == 1001 and t[0] == 0.0 and t[-1] <= 100.0  # as many reads as the fixed grid
    k = np.arange(len(t))
    off = (t - k / 10.0)[1:-1] * 10.0  # position inside each period, 0–1
    assert off.min() >= 0 and off.max() < 1
    # uniform over the period: every phase is equally likely to be sampled (nothing to lock onto)
    assert stats.kstest(off, "uniform").pvalue > 0.01
    assert s.stats.mean_period_s == pytest.approx(0.1, rel=1e-3)  # mean rate unchanged
    assert abs(s.stats.drift_s) < 1e-9  # drift-free: deadlines are absolute


def test_the_seed_is_recorded_and_regenerates_every_instant():
    a, sa = _instants(4.0, 30.0, seed=123)
    b, _ = _instants(4.0, 30.0, seed=123)
    c, _ = _instants(4.0, 30.0, seed=124)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert sa.jitter_seed == 123 and sa.stats.to_dict()["jitter_seed"] == 123
    assert np.allclose(a, sample_instants(0.0, 30.0, 4.0, seed=123))


def test_an_unseeded_sampler_draws_and_records_its_own_seed_and_a_replay_is_not_jittered():
    s1 = Sampler([Probe(MonotonicClock())], 2.0)  # real time: fresh entropy, recorded
    s2 = Sampler([Probe(MonotonicClock())], 2.0)
    assert s1.jitter == 1.0 and s1.jitter_seed is not None and s1.jitter_seed != s2.jitter_seed
    assert Sampler([Probe(VirtualClock())], 2.0).jitter_seed == 0  # simulated time stays reproducible
    assert Sampler([Probe(VirtualClock(), kind="replay")], 2.0).jitter == 0.0
    with pytest.raises(ValueError):
        Sampler([Probe(VirtualClock())], 2.0, jitter=1.5)


def test_work_placed_between_the_grid_samples_is_seen_by_the_jittered_sampler():
    """The issue's phase-lock: 80 % of each 0.5 s period busy, idle only around the grid instants. The fixed grid
    never sees the work; the jittered sampler's share of busy reads is the busy share."""

    def busy(t: np.ndarray) -> np.ndarray:
        ph = np.mod(t, 0.5)
        return (ph > 0.05) & (ph < 0.45)

    grid, _ = _instants(2.0, 600.0, seed=1, jitter=0.0)
    jit, _ = _instants(2.0, 600.0, seed=1)
    assert busy(grid).mean() == 0.0
    assert busy(jit).mean() == pytest.approx(0.8, abs=0.05)


def test_sensor_timing_table_cites_every_entry():
    assert TABLE
    for t in TABLE.values():
        assert t.source and 0 <= t.blind_fraction < 1 and t.update_period_s > 0
    nv = sensor_timing("h100", "nvml-power")
    assert nv is not None and nv.window_s == 0.025 and nv.update_period_s == 0.1 and "2312.02741" in nv.source
    assert "INA3221" in sensor_timing("orin-nano", "ina3221").source


def test_check_sampling_names_inadequate_rates_and_blind_time():
    slow = check_sampling("orin-nano", "ina3221", 2.0)  # point readings of 1.1 ms every 6.6 ms, no counter
    assert not slow.adequate and slow.warnings and "below" in slow.warnings[0]
    assert slow.unobserved_fraction == pytest.approx(1 - 2.0 * 0.0011)
    nv = check_sampling("sim:h100", "nvml-energy", 2.0)  # a counter: 2 Hz is enough, the blind 75 % remains
    assert nv.adequate and nv.unobserved_fraction == pytest.approx(0.75)
    assert not check_sampling("h100", "nvml-energy", 0.2).adequate
    unknown = check_sampling("h100", "mystery", 10.0)
    assert not unknown.adequate and unknown.unobserved_fraction == 1.0
    with pytest.raises(InputError):
        check_sampling("h100", "nvml-energy", float("nan"))
    assert sensor_kind_of("nvml:0") == "nvml-energy" and sensor_kind_of("jetson") == "ina3221"


def test_the_monitor_checks_each_sensors_rate_at_start():
    from flopwatch.monitor.daemon import _sampling_check
    from flopwatch.sim.accelerator import SimulatedAccelerator
    from flopwatch.sim.sensor import SimSensor

    clk = VirtualClock()
    orin = SimSensor(SimulatedAccelerator("orin-nano"), clk)
    h100 = SimSensor(SimulatedAccelerator("h100", device_index=1), clk)
    # the twin's Orin read-out: a 100 ms point average, no counter
    assert not _sampling_check(orin.info(), 2.0).adequate and _sampling_check(h100.info(), 2.0).adequate
    assert _sampling_check(orin.info(), 10.0).adequate


def test_record_stores_the_jitter_seed_and_the_sampling_check(tmp_path, capsys):
    from flopwatch.cli import main
    from flopwatch.telemetry.trace import Trace

    out = tmp_path / "t.parquet"
    assert (
        main(
            [
                "record",
                "--sensor",
                "sim:orin-nano",
                "--rate",
                "2",
                "--duration",
                "2",
                "-o",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    assert "below the 10 Hz needed" in capsys.readouterr().err
    md = Trace.read(out).metadata
    assert isinstance(md["jitter_seed"], int) and md["jitter"] == 1.0
    assert md["sampling_checks"]["sim:orin-nano"]["adequate"] is False
