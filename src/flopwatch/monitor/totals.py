"""Per-device running totals since the ledger began (persisted in every checkpoint row)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from flopwatch.units import finite


@dataclass
class Totals:
    """Running per-device totals since the ledger began (persisted in every checkpoint row)."""

    energy_j: float = 0.0  # gross energy measured
    net_energy_j: float = 0.0  # ∫(P − P_idle) over all measured time (idle-baseline drift included)
    busy_s: float = 0.0
    busy_net_energy_j: float = 0.0
    busy_tb: float = 0.0  # DRAM traffic in busy intervals (TB), when the sensor reports it
    busy_util_s: float = 0.0  # ∫ util dt over busy intervals (for the busy-weighted mean utilisation)
    workload_net_energy_j: float = 0.0  # sum over recorded workload rows
    # Net energy of quiet (not busy) stretches: each finished stretch adds max(0, its net energy), so a
    # baseline set too high cannot cancel bursts with the negative net energy of idle time.
    quiet_net_energy_j: float = 0.0
    quiet_open_net_energy_j: float = 0.0  # the current quiet stretch (may be negative)
    workload_s: float = 0.0
    workloads: int = 0
    estimated_flops: float = 0.0  # assess stage applied to the busy totals (kept monotone)
    observed_s: float = 0.0  # time spanned by readings
    covered_s: float = 0.0  # of which covered by readings at the nominal rate
    sensor_errors: int = 0  # failed reads and implausible readings
    implausible_readings: int = 0  # readings outside physical limits (also counted in sensor_errors)
    missed_ticks: int = 0  # sampler overruns (host too slow), not sensor faults
    min_idle_power_w: float | None = None  # lowest mean power over a settled idle window
    negative_net_energy_j: float = (
        0.0  # net energy of settled idle windows that sat below the baseline (<= 0)
    )
    t_s: float | None = None  # sensor time of the last reading
    wall: float | None = None

    def derived(self) -> dict[str, Any]:
        d = asdict(self)
        # Energy that fell outside detected workloads (what window verdicts bound with the efficiency envelope):
        # busy intervals no workload row holds (short bursts, open workloads) plus the positive net energy of
        # quiet stretches; and the busy part alone.
        d["outside_net_energy_j"] = self.outside_net_energy_j()
        d["outside_busy_net_energy_j"] = self.busy_net_energy_j - self.workload_net_energy_j
        d["outside_busy_s"] = max(0.0, self.busy_s - self.workload_s)
        d["coverage"] = self.covered_s / self.observed_s if self.observed_s > 0 else None
        return d

    def outside_net_energy_j(self) -> float:
        """Cumulative net energy outside recorded workload rows (never decreases by more than float noise)."""
        return (
            max(0.0, self.busy_net_energy_j - self.workload_net_energy_j)
            + self.quiet_net_energy_j
            + max(0.0, self.quiet_open_net_energy_j)
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Totals:
        """Totals from a checkpoint; a value that is missing, null or not finite keeps its default."""
        out = cls()
        for name, f in cls.__dataclass_fields__.items():
            v = finite(d.get(name))
            if v is None:
                continue
            setattr(out, name, int(v) if f.type == "int" else v)
        return out


__all__ = ["Totals"]
