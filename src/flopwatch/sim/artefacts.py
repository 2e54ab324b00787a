"""How a real sensor distorts the board's power and activity: the simulated NVML (and Jetson INA3221) read-out.

NVML on data-center GPUs (Yang, Adamek & Armour, "Accurate and Convenient Energy Measurements for GPUs: A Detailed
Study of NVIDIA GPU's Built-In Power Sensor", SC 2024, arXiv 2312.02741; NVML API reference):

* **Update period** — the power reading is refreshed every ~100 ms (A100, H100).
* **Partial sampling** — each update averages only part of its period: on A100/H100 about 25 ms of every 100 ms,
  so short kernels between the sampled windows are invisible and periodic workloads alias.
* **Averaging window** — ``nvmlDeviceGetPowerUsage`` (``power.draw``/``power.average``) on Ampere and later is the
  mean over the last ~1 s of updates; ``power.draw.instant`` is the latest update.
* **Energy counter** — ``nvmlDeviceGetTotalEnergyConsumption`` in mJ (1 mJ resolution), built from the same
  updates, so it inherits partial sampling.
* **Utilisation** — ``nvmlDeviceGetUtilizationRates().gpu``: percent (integer) of the last sample period during
  which one or more kernels ran; the period is between 1 s and 1/6 s depending on the product.
* **Noise** — each update carries measurement noise; we use 1 % (SD) per update, an assumption within the ±5 W
  accuracy NVIDIA states for ``power.draw``. Run-to-run variation is on the accelerator side (MASCOTS repeat floor).
* **No DRAM byte counter** — NVML has no DRAM-traffic query; Hopper and later expose GPM's ``DRAM_BW_UTIL`` (share
  of peak bandwidth), which flopwatch's NVML sensor reports as ``extra_dram_bw_util``. The twin offers exactly what
  the real sensor does (:attr:`SensorModel.dram`), so an estimator that needs DRAM traffic fails on the twin where it
  would fail on the hardware, instead of being handed the simulator's exact analytic byte count.

The Jetson Orin Nano's INA3221 rail monitor has no energy counter; its sysfs power reading is a short average that
``tegrastats``/sysfs refresh every ~100 ms with full duty cycle, and GPU load (``GR3D``) is a busy fraction; DRAM
traffic comes from the EMC activity monitor (flopwatch's Jetson sensor reports it as ``dram_bytes_per_s``).

All read-outs are computed in closed form from the accelerator's piecewise-periodic signal, vectorised over time,
so simulating is cheap: one read costs a few microseconds of numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flopwatch.sim.accelerator import SimulatedAccelerator


@dataclass(frozen=True)
class SensorModel:
    """Read-out characteristics of one sensor kind."""

    kind: str  # "nvml" | "ina3221"
    update_period_s: float = 0.1
    sample_window_s: float = 0.025  # part of each update period that is actually measured
    avg_window_s: float = 1.0  # power.average window
    util_period_s: float = 1.0 / 6.0
    noise_sd_frac: float = 0.01
    energy_resolution_j: float = 1e-3  # None-like 0 for sensors without a counter
    has_energy_counter: bool = True
    util_resolution: float = 0.01  # NVML reports integer percent
    # DRAM traffic as the real sensor reports it: "bytes" (Jetson EMC actmon → dram_bytes_per_s), "gpm" (NVML GPM
    # on Hopper+: DRAM bandwidth utilisation 0–1 as extra_dram_bw_util) or "none" (NVML before Hopper).
    dram: str = "none"

    @classmethod
    def for_device(cls, key: str) -> SensorModel:
        if key == "orin-nano":
            # INA3221 via sysfs: full-duty short average, no counter; GR3D load in 0.1 % steps.
            return cls(
                kind="ina3221",
                update_period_s=0.1,
                sample_window_s=0.1,
                avg_window_s=0.1,
                util_period_s=0.1,
                noise_sd_frac=0.01,
                energy_resolution_j=0.0,
                has_energy_counter=False,
                util_resolution=0.001,
                dram="bytes",
            )
        # GPM (nvmlGpmQueryDeviceSupport) exists on Hopper and later only.
        return cls(kind="nvml", dram="gpm" if key in ("h100", "h200") else "none")


class SensorReadout:
    """The sensor's view of one :class:`SimulatedAccelerator`: what NVML would return at time ``t``.

    Any ``t`` can be asked, in any order. NVML's values only change at update ticks (power, energy, clocks,
    temperature) and utilisation periods, so the read-out is tabulated per tick in blocks of :attr:`BLOCK` ticks
    (vectorised) and a read is a table lookup. The noise of update ``k`` is a fixed function of the seed and ``k``,
    so the 1-s average and the energy counter always agree with each other.
    """

    BLOCK = 4096

    def __init__(self, acc: SimulatedAccelerator, model: SensorModel | None = None, *, seed: int = 0) -> None:
        self.acc = acc
        self.model = model or SensorModel.for_device(acc.spec.key)
        self._seed = int(seed)
        rng = np.random.default_rng([self._seed, acc.device_index, 0x5E05])
        self._phase = float(rng.uniform(0, self.model.update_period_s))
        self._n_avg = max(1, int(round(self.model.avg_window_s / self.model.update_period_s)))
        self._pblocks: dict[int, dict[str, np.ndarray]] = {}
        self._ublocks: dict[int, np.ndarray] = {}
        self._e_end: dict[int, float] = {-1: 0.0}  # cumulative counter energy at the end of each power block

    # -- per-update samples -------------------------------------------------------------------------------------
    def _noise(self, k: np.ndarray) -> np.ndarray:
        """Per-update relative noise, a fixed function of (seed, device, k): generated per block of updates."""
        out = np.empty(k.size)
        blocks = k // self.BLOCK
        for b in np.unique(blocks):
            g = np.random.default_rng([self._seed, self.acc.device_index, 0x7015E, int(b)])
            z = g.standard_normal(self.BLOCK) * self.model.noise_sd_frac
            sel = blocks == b
            out[sel] = z[k[sel] - b * self.BLOCK]
        return out

    def update_samples_w(self, k: np.ndarray) -> np.ndarray:
        """Power (W) that update ``k`` (≥ 0) reports: the mean over its measured window, with noise."""
        m = self.model
        k = np.asarray(k, np.int64)
        a = k * m.update_period_s + self._phase
        e = self.acc.true_energy_j(np.concatenate([a, a + m.sample_window_s]))
        n = k.size
        return (e[n:] - e[:n]) / m.sample_window_s * (1.0 + self._noise(k))

    def tick_time(self, k: np.ndarray | int) -> np.ndarray:
        """Time at which update ``k`` becomes visible (end of its measured window)."""
        m = self.model
        return np.asarray(k) * m.update_period_s + self._phase + m.sample_window_s

    def _power_block(self, b: int) -> dict[str, np.ndarray]:
        blk = self._pblocks.get(b)
        if blk is not None:
            return blk
        if b - 1 not in self._e_end:  # the counter needs every earlier block's energy: fill them in order
            start = max(x for x in self._e_end if x < b)
            for bb in range(start + 1, b):
                self._power_block(bb)
        m, n_avg, B = self.model, self._n_avg, self.BLOCK
        k0 = b * B
        k = np.arange(k0 - n_avg + 1, k0 + B, dtype=np.int64)
        valid = k >= 0
        s = np.zeros(k.size)
        s[valid] = self.update_samples_w(k[valid])
        cs = np.concatenate([[0.0], np.cumsum(s)])
        cn = np.concatenate([[0], np.cumsum(valid)])
        tot = cs[n_avg:] - cs[:-n_avg]
        cnt = cn[n_avg:] - cn[:-n_avg]
        own = s[n_avg - 1 :]
        energy = self._e_end[b - 1] + np.cumsum(own * m.update_period_s)
        self._e_end[b] = float(energy[-1])
        kk = k[n_avg - 1 :]
        st = self.acc.state(self.tick_time(kk))
        work = np.where(st["working"], 1.0, 0.0)
        blk = {
            "power_w": tot / np.maximum(cnt, 1),
            "power_instant_w": own,
            "energy_j": energy,
            "sm_clock_mhz": np.where(st["working"], st["sm_clock_mhz"], self.acc.dvfs.f_idle_mhz),
            "mem_util": np.round(st["mem_util"] * work * 100) / 100,
            "dram_bytes_per_s": st["dram_bytes_per_s"] * work,
            "temp_c": np.round(st["temp_c"]),  # NVML reports whole degrees
        }
        if len(self._pblocks) >= 4:  # bounded memory for long-running daemons
            self._pblocks.pop(next(iter(self._pblocks)))
        self._pblocks[b] = blk
        return blk

    def _util_block(self, b: int) -> np.ndarray:
        u = self._ublocks.get(b)
        if u is not None:
            return u
        m = self.model
        j = np.arange(b * self.BLOCK, (b + 1) * self.BLOCK, dtype=np.int64)
        edges = np.append(j, j[-1] + 1) * m.util_period_s
        busy = np.diff(self.acc.busy_time_s(edges)) / m.util_period_s
        u = np.clip(np.round(busy / m.util_resolution) * m.util_resolution, 0.0, 1.0)
        if len(self._ublocks) >= 4:
            self._ublocks.pop(next(iter(self._ublocks)))
        self._ublocks[b] = u
        return u

    # -- the read-out -------------------------------------------------------------------------------------------
    def read_one(self, t: float) -> dict[str, float]:
        """Everything the sensor reports at time ``t`` (scalar fast path: a table lookup)."""
        m = self.model
        k = math.floor((t - self._phase - m.sample_window_s) / m.update_period_s)
        if k < 0:
            st = self.acc.state(np.array([t]))
            out = {
                "power_w": self.acc.idle_power_w,
                "power_instant_w": self.acc.idle_power_w,
                "energy_j": 0.0,
                "sm_clock_mhz": self.acc.dvfs.f_idle_mhz,
                "mem_util": 0.0,
                "dram_bytes_per_s": 0.0,
                "temp_c": float(np.round(st["temp_c"][0])),
            }
        else:
            b, i = divmod(k, self.BLOCK)
            blk = self._power_block(b)
            out = {name: float(col[i]) for name, col in blk.items()}
        if m.has_energy_counter and m.energy_resolution_j > 0:
            out["energy_j"] = math.floor(out["energy_j"] / m.energy_resolution_j) * m.energy_resolution_j
        elif not m.has_energy_counter:
            out.pop("energy_j", None)
        j = math.floor(t / m.util_period_s) - 1
        if j < 0:
            out["util"] = 0.0
        else:
            b, i = divmod(j, self.BLOCK)
            out["util"] = float(self._util_block(b)[i])
        return out

    def read(self, t: np.ndarray | float) -> dict[str, np.ndarray]:
        """:meth:`read_one` over an array of times (bulk: traces for benchmarks and tests)."""
        ts = np.atleast_1d(np.asarray(t, float))
        rows = [self.read_one(float(x)) for x in ts]
        return {k: np.array([r[k] for r in rows]) for k in rows[0]} if rows else {}

    def true_mean_power_w(self, t0: float, t1: float) -> float:
        """Exact mean power of the simulated board over [t0, t1] (for tests of the read-out's bias)."""
        e = self.acc.true_energy_j(np.array([t0, t1]))
        return float((e[1] - e[0]) / (t1 - t0))
