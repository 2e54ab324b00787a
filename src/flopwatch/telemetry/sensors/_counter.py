"""A vendor energy counter turned into the sensor's own reset-proof cumulative energy (J since it opened).

Shared by the NVML (total-energy counter, mJ) and amdsmi (energy accumulator) backends. A counter that steps
backwards was restarted (driver reload, GPU reset): the true increment over that interval is unknowable, so
the interval is bridged with the trapezoid of power instead — never a negative or wrap-sized jump — and the
reading is flagged ``extra["energy_reset"] = 1``.
"""

from __future__ import annotations


class ResetAwareEnergy:
    """Accumulate counter increments in J; call :meth:`update` once per reading."""

    def __init__(self) -> None:
        self.energy_j = 0.0
        self.resets = 0
        self._prev_j: float | None = None
        self._prev_t = 0.0
        self._prev_power_w = 0.0

    def update(self, counter_j: float, t_s: float, power_w: float, extra: dict[str, float]) -> float:
        """Fold in the counter value ``counter_j`` (J) read at ``t_s`` with power ``power_w``; return the total."""
        if self._prev_j is not None:
            if counter_j < self._prev_j:
                self.resets += 1
                extra["energy_reset"] = 1.0
                self.energy_j += 0.5 * (self._prev_power_w + power_w) * max(0.0, t_s - self._prev_t)
            else:
                self.energy_j += counter_j - self._prev_j
        self._prev_j, self._prev_t, self._prev_power_w = counter_j, t_s, power_w
        return self.energy_j
