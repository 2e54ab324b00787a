"""The attack families, as data: what the evader does, on which devices, and what defends the verdict.

A family is one row of :data:`FAMILIES`: a generator ``kind`` of :mod:`flopwatch.redteam.engine` (phases,
timing, context, group, observable tampering, windows, real records) and its parameters. Adding a family is
adding a row; no family has its own code path. ``defence`` is the status ``docs/threat-model.md`` states:

* ``defended`` — physics and the verifier's own context bound it, whatever the operator does;
* ``defended when X is sampled`` — sound only when the verifier configures observable X (named in ``needs``);
* ``needs attestation`` — the node itself lies about its sensor or clock; only hardware attestation (named in
  ``needs``) closes it; until then the verdict rests on the verifier's context checks (rows flagged, never "below").

A ``sweep`` parameter (name → values) is the evader's search over its knobs: the full suite runs every
combination, ``--quick`` the first value of each (:func:`flopwatch.redteam.engine.variants`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

DC = ("a100", "h100", "h200")  # the simulated data-centre twins
ORIN = ("orin-nano",)
V2 = ("v2",)  # the real Jetson Orin Nano records (Fowler 2026)


@dataclass(frozen=True)
class Family:
    key: str
    name: str
    kind: str
    devices: tuple[str, ...]
    origin: str  # "issue 15" (the suite before), "issue 21 table", "issue 21 beyond"
    defence: str  # "defended" | "defended when X is sampled" | "needs attestation"
    needs: str  # the observable or attestation the defence rests on
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "name": self.name,
            "kind": self.kind,
            "devices": list(self.devices),
            "origin": self.origin,
            "defence": self.defence,
            "needs": self.needs,
            "params": dict(self.params),
        }


def _f(
    key: str, name: str, kind: str, devices: tuple[str, ...], origin: str, defence: str, needs: str, **p: Any
) -> Family:
    return Family(key, name, kind, devices, origin, defence, needs, MappingProxyType(p))


_T21, _T15, _B21 = "issue 21 table", "issue 15", "issue 21 beyond"
_PHYS = "datasheet peaks and best FLOP/J of the device (any format, clock, power limit)"

FAMILIES: tuple[Family, ...] = (
    # ---- issue 21's table ------------------------------------------------------------------------------------
    _f(
        "mixed-fp32-bf16",
        "fp32 phase then bf16 phase in one workload",
        "phases",
        DC,
        _T21,
        "defended",
        _PHYS,
        phases=(("fp32", 0.5), ("bf16", 0.5)),
        sweep={"first_share": (0.5, 0.2, 0.8)},
    ),
    _f(
        "mixed-fp32-tf32",
        "fp32 phase then tf32 phase in one workload",
        "phases",
        DC,
        _T21,
        "defended",
        _PHYS,
        phases=(("fp32", 0.5), ("tf32", 0.5)),
        sweep={"first_share": (0.5, 0.2, 0.8)},
    ),
    _f(
        "mixed-real",
        "fp32 run then fp16/bf16/tf32 run, judged as one workload (real v2)",
        "real",
        V2,
        _T21,
        "defended",
        _PHYS,
        op="mix",
    ),
    _f(
        "fp8-full-power",
        "fp8 at full power on H100/H200 (no cap), bf16 profile",
        "phases",
        ("h100", "h200"),
        _T21,
        "defended",
        _PHYS + "; tightened by the tensor-pipe counter",
        phases=(("fp8", 1.0),),
    ),
    _f(
        "underclock",
        "SM clock locked low (underclocking)",
        "phases",
        DC,
        _T21,
        "defended when X is sampled",
        "SM clock (max/min) and power limit",
        phases=(("bf16", 1.0),),
        clock_frac=0.55,
        sweep={"clock_frac": (0.55, 0.4, 0.75)},
    ),
    _f(
        "dvfs",
        "clock moved within the run (DVFS: 100 % then 60 %)",
        "phases",
        DC,
        _T21,
        "defended when X is sampled",
        "SM clock (max/min) and power limit",
        phases=(("bf16", 0.5), ("bf16", 0.5)),
        clock_fracs=(1.0, 0.6),
    ),
    _f(
        "power-padding",
        "bf16 job + a burner kernel padding power",
        "phases",
        DC,
        _T21,
        "defended",
        _PHYS,
        phases=(("bf16", 1.0),),
        burner_frac=0.6,
        sweep={"burner_frac": (0.6, 0.3, 1.0)},
    ),
    _f(
        "power-padding-real",
        "tf32/fp16/bf16 job padded to the fp32 power range (real v2)",
        "real",
        V2,
        _T21,
        "defended",
        _PHYS,
        op="pad",
    ),
    _f(
        "phase-lock",
        "work only between the samples of a 2 Hz fixed-grid sampler",
        "timing",
        ORIN + ("a100",),
        _T21,
        "defended when X is sampled",
        "jittered sampling at the sensor's adequate rate (sensor_timing)",
        placement="between",
        evader_rate_hz=2.0,
        sweep={"evader_rate_hz": (2.0, 1.0, 5.0)},
    ),
    _f(
        "phase-lock-adequate",
        "work between a 2 Hz grid's samples, the verifier sampling at its adequate rate (jittered)",
        "timing",
        ORIN + ("h100",),
        _B21,
        "defended when X is sampled",
        "jittered sampling at the sensor's adequate rate (sensor_timing)",
        placement="between",
        evader_rate_hz=2.0,
        rate_hz=10.0,
    ),
    _f(
        "nvml-blind",
        "work inside NVML's blind 75 ms of every 100 ms (Yang et al. SC 2024)",
        "timing",
        DC,
        _T21,
        "defended when X is sampled",
        "a cumulative pipe/energy counter covering the blind 75 % (DCGM profiling)",
        placement="nvml-blind",
        dtype="fp8",
        sweep={"dtype": ("fp8", "bf16")},
    ),
    _f(
        "own-profile",
        "the operator's own profile with params × 0.6",
        "context",
        DC + ORIN,
        _T21,
        "defended",
        "the verifier's profile (rows carry the profile hash; another hash is flagged)",
        tamper="profile",
    ),
    _f(
        "own-profile-real",
        "the operator's own profile with params × 0.6 (real v2)",
        "real",
        V2,
        _T21,
        "defended",
        "the verifier's profile",
        op="profile",
    ),
    _f(
        "peak-env",
        "FLOPWATCH_PEAK_FLOPS set on the node (peaks ÷ 4)",
        "context",
        DC,
        _T21,
        "defended",
        "the verifier's device table (a peak override is flagged)",
        tamper="peaks",
    ),
    _f(
        "replay-sensor",
        "an honest small trace replayed as the daemon's sensor",
        "context",
        DC + ORIN,
        _T21,
        "needs attestation",
        "an attested sensor path (NVML/INA3221 read inside a TEE or by the BMC); meanwhile "
        "the sensor kind in each row (replay is flagged)",
        tamper="replay",
    ),
    _f(
        "clock-fast",
        "the node's wall clock run fast (rows leave the window)",
        "context",
        DC,
        _T21,
        "needs attestation",
        "a trusted time source (signed timestamps); meanwhile monotonic/wall disagreement is flagged",
        tamper="clock",
    ),
    _f(
        "split-labels",
        "one job's 8 ranks under 8 pod labels",
        "group",
        ("h100",),
        _T21,
        "defended",
        "cohort grouping and the fleet-wide total (labels never decide a group)",
        n=8,
        mode="labels",
    ),
    _f(
        "unlabelled",
        "GPUs without job labels",
        "group",
        ("a100",),
        _T21,
        "defended",
        "the fleet-wide total over every GPU",
        n=4,
        mode="unlabelled",
    ),
    _f(
        "relabel-model",
        "H100 fp8 job reported as an A100 (modelName relabelled)",
        "context",
        ("h100",),
        _T21,
        "defended when X is sampled",
        "peak power and clock (an 'A100' drawing > 400 W is bounded as the most "
        "capable device consistent with them)",
        tamper="relabel",
    ),
    _f(
        "power-limit-300",
        "a 300 W power limit on H100/H200",
        "phases",
        ("h100", "h200"),
        _T21,
        "defended when X is sampled",
        "power limit and SM clock",
        phases=(("bf16", 1.0),),
        cap_w=300.0,
    ),
    _f(
        "fp8-at-bf16-peak",
        "fp8 counted at the bf16 peak (node's device table)",
        "context",
        ("h100",),
        _T21,
        "defended",
        "the verifier's device table (fp8 = 2 × bf16)",
        tamper="fp8peak",
    ),
    _f(
        "replay-sensor-real",
        "the smallest honest v2 trace replayed while a frontier run executes (real v2)",
        "real",
        V2,
        _T21,
        "needs attestation",
        "an attested sensor path; meanwhile the sensor kind in each row (replay is flagged)",
        op="replay",
    ),
    # ---- the suite before issue 21 (issue 15), kept -----------------------------------------------------------
    _f(
        "label-stripped",
        "tf32/fp16/bf16 run, precision label stripped (real v2)",
        "real",
        V2,
        _T15,
        "defended",
        _PHYS,
        op="strip",
    ),
    _f("dram-x5", "DRAM counter × 5 (real v2)", "real", V2, _T15, "defended", _PHYS, op="dram5"),
    _f(
        "dram-top",
        "DRAM counter inflated to the regime's top (real v2)",
        "real",
        V2,
        _T15,
        "defended",
        _PHYS,
        op="dramtop",
    ),
    _f(
        "idle-inflated-real",
        "idle baseline measured under +1 W (real v2)",
        "real",
        V2,
        _T15,
        "defended",
        "the calibration's idle and the idle check",
        op="idle",
    ),
    _f(
        "low-util-real",
        "low utilisation (duty cycling), fp32 (real v2)",
        "real",
        V2,
        _T15,
        "defended",
        _PHYS,
        op="lowutil",
    ),
    _f(
        "cap-500-bf16",
        "H100 bf16 under a 500 W cap",
        "phases",
        ("h100",),
        _T15,
        "defended when X is sampled",
        "power limit and SM clock",
        phases=(("bf16", 1.0),),
        cap_w=500.0,
    ),
    _f(
        "cap-500-fp8",
        "fp8 job under a bf16 profile, 500 W cap",
        "phases",
        ("h100",),
        _T15,
        "defended when X is sampled",
        "power limit and SM clock",
        phases=(("fp8", 1.0),),
        cap_w=500.0,
    ),
    _f(
        "cap-200",
        "bf16 at a 200 W cap",
        "phases",
        ("h100",),
        _T15,
        "defended when X is sampled",
        "power limit and SM clock",
        phases=(("bf16", 1.0),),
        cap_w=200.0,
    ),
    _f(
        "chunks",
        "a job split into chunks that each get detected",
        "window",
        ("a100", "orin-nano"),
        _T15,
        "defended",
        "window verdicts over the ledger",
        pattern="chunks",
    ),
    # ---- beyond the table ---------------------------------------------------------------------------------------
    _f(
        "bursts",
        "bursts between samples / under the detector (0.4 s every 6 s)",
        "window",
        ("h100", "orin-nano"),
        _B21,
        "defended",
        "window verdicts with the energy outside workloads",
        pattern="bursts",
    ),
    _f(
        "split-time",
        "a job split across time: many short runs under the detector",
        "window",
        ("h200",),
        _B21,
        "defended",
        "window verdicts with the energy outside workloads",
        pattern="short-runs",
    ),
    _f(
        "inference-idle",
        "inference disguised as idle (low duty, never detected)",
        "window",
        ("a100",),
        _B21,
        "defended",
        "window verdicts with the energy outside workloads",
        pattern="idle-inference",
    ),
    _f(
        "split-devices",
        "one job split across devices of two models",
        "group",
        ("a100", "h100"),
        _B21,
        "defended",
        "cohort grouping and the fleet-wide total",
        n=4,
        mode="devices",
    ),
    _f(
        "telemetry-paused",
        "telemetry paused for half the run",
        "tamper",
        DC,
        _B21,
        "defended",
        "coverage (gaps bounded at peak)",
        op="pause",
    ),
    _f(
        "counter-reset",
        "energy counter reset mid-run (driver reload)",
        "tamper",
        DC,
        _B21,
        "defended",
        "coverage (the reset interval is bridged and counted as a gap)",
        op="reset",
    ),
    _f(
        "idle-inflated",
        "idle baseline inflated by 20 %",
        "tamper",
        DC + ORIN,
        _B21,
        "defended",
        "the calibration's idle and the idle check",
        op="idle",
    ),
    _f(
        "dram-inflated",
        "DRAM counter inflated × 3",
        "tamper",
        ("h100", "orin-nano"),
        _B21,
        "defended",
        _PHYS,
        op="dram",
    ),
    _f(
        "util-spoofed",
        "utilisation spoofed low (× 0.3)",
        "tamper",
        DC + ORIN,
        _B21,
        "defended",
        _PHYS,
        op="util",
    ),
    _f(
        "util-spoofed-real",
        "utilisation spoofed low (× 0.3) (real v2)",
        "real",
        V2,
        _B21,
        "defended",
        _PHYS,
        op="util",
    ),
    _f(
        "duration-under-timestamps",
        "a tenth of the run's duration and energy reported, its timestamps spanning all of it",
        "tamper",
        DC,
        "round 8",
        "defended",
        "the run's own timestamps (a shorter duration is widened to them, the rest unobserved at peak)",
        op="duration",
    ),
    _f(
        "rate-lowered",
        "sampling rate lowered to 0.2 Hz",
        "timing",
        ("h100", "orin-nano"),
        _B21,
        "defended when X is sampled",
        "a sampling rate the sensor timing table calls adequate",
        placement="steady",
        rate_hz=0.2,
    ),
)

FAMILY_BY_KEY: Mapping[str, Family] = MappingProxyType({f.key: f for f in FAMILIES})
