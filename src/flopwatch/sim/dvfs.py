"""Dynamic voltage and frequency scaling of the simulated accelerator: power caps and locked clocks.

CMOS dynamic power is ``P_dyn ∝ C·f·V²`` (e.g. Mei, Wang & Chu, "A Survey and Measurement Study of GPU DVFS on
Energy Conservation", Digital Communications and Networks 3(2), 2017). GPU voltage/frequency tables are flat at a
minimum voltage up to a knee clock and rise about linearly above it (same survey, Fig. 3; the A100/H100 V-f curves
read with ``nvidia-smi -q -d VOLTAGE`` show the same shape), so ``V(f)/V_max = v_min`` below the knee and a
straight line up to 1 at ``f_max``.

Only the SM clock is scaled: HBM/GDDR runs on its own clock, so memory-bound time and host time do not change.
The dynamic *energy per step* therefore scales with ``(V/V_max)²`` and the dynamic power with that energy over the
(longer) step time; idle/static power is left unchanged (leakage also falls with voltage, a second-order effect
we ignore). A power cap picks the highest supported clock (15 MHz steps, like ``nvidia-smi -q -d SUPPORTED_CLOCKS``)
whose power stays under the cap, as the driver's power controller does on average.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from flopwatch.devices import DeviceSpec
from flopwatch.errors import InputError

#: Clock granularity of NVIDIA's supported-clocks tables (MHz).
CLOCK_STEP_MHZ = 15.0


@dataclass(frozen=True)
class DVFSModel:
    """Voltage/frequency curve and clock range of one device."""

    f_max_mhz: float
    f_min_mhz: float
    f_idle_mhz: float  # clock NVML reports while idle
    v_min_ratio: float = 0.65  # V/V_max on the flat part of the curve (assumption, see module docstring)
    knee_ratio: float = 0.5  # f/f_max where voltage starts to rise

    @classmethod
    def for_spec(cls, spec: DeviceSpec) -> DVFSModel:
        f_max = float(spec.max_sm_clock_mhz or 1500.0)
        # A100/H100 list 210 MHz as the lowest supported graphics clock; Jetson Orin's lowest GPU DVFS step is 306 MHz.
        f_min = 306.0 if spec.key == "orin-nano" else 210.0
        return cls(f_max_mhz=f_max, f_min_mhz=min(f_min, f_max), f_idle_mhz=min(f_min, f_max))

    def voltage_ratio(self, f_mhz: float | np.ndarray) -> np.ndarray:
        """V(f)/V(f_max)."""
        x = np.clip(np.asarray(f_mhz, float) / self.f_max_mhz, 0.0, 1.0)
        rise = (x - self.knee_ratio) / (1.0 - self.knee_ratio)
        return np.where(
            x <= self.knee_ratio, self.v_min_ratio, self.v_min_ratio + (1 - self.v_min_ratio) * rise
        )

    def dyn_energy_scale(self, f_mhz: float | np.ndarray) -> np.ndarray:
        """Dynamic energy per unit of work at ``f`` relative to ``f_max``: (V/V_max)²."""
        return self.voltage_ratio(f_mhz) ** 2

    def clocks(self) -> np.ndarray:
        """Supported SM clocks, ascending, ending at ``f_max``."""
        lo, hi = self.f_min_mhz, self.f_max_mhz
        grid = np.arange(hi, lo - 1e-9, -CLOCK_STEP_MHZ)[::-1]
        return grid

    def check_locked(self, locked_mhz: float) -> float:
        if not (self.f_min_mhz <= locked_mhz <= self.f_max_mhz):
            raise InputError(
                f"locked clock {locked_mhz:g} MHz outside the supported range "
                f"{self.f_min_mhz:g}–{self.f_max_mhz:g} MHz",
                field="locked_clock_mhz",
            )
        return float(locked_mhz)

    def operating_clock(
        self,
        power_at: Callable[[np.ndarray], np.ndarray],
        *,
        power_cap_w: float,
        locked_clock_mhz: float | None = None,
    ) -> float:
        """Highest clock (≤ the locked clock, if any) whose power ``power_at(f)`` stays ≤ ``power_cap_w``.

        ``power_at`` must be vectorised over clocks. When even the lowest clock exceeds the cap, the lowest clock
        is returned (real devices then run over the cap, which NVML shows as ``SW Power Cap`` throttling).
        """
        grid = self.clocks()
        if locked_clock_mhz is not None:
            grid = grid[grid <= locked_clock_mhz + 1e-9]
            if grid.size == 0 or grid[-1] < locked_clock_mhz - 1e-9:
                grid = np.append(grid, locked_clock_mhz)
        p = power_at(grid)
        ok = np.flatnonzero(p <= power_cap_w + 1e-9)
        return float(grid[ok[-1]]) if ok.size else float(grid[0])
