"""The published values of the MASCOTS study's Tables II, III and IV, with where they were read.

Paper: N. Enskat and P. Wiesner, "Evaluating MFU as a Proxy for GPU Power for Energy-Aware Simulation of LLM
Training", MASCOTS 2026, arXiv:2608.03880 (v1, 2026-08-04).

Provenance, stated plainly: the paper's PDF/HTML is not available offline here. The numbers below were read
from a third-party technical summary of the paper (a Chinese-language "deep dive" note dated 2026-08-07 that
says it transcribes Tables I–IV from the arXiv HTML full text of 2608.03880v1), found through the project's
public-code search index. They have not been checked against the PDF itself. Every MFU number of Tables II and
III and every entry of Table IV is reproduced to its printed rounding by our own computation on the vendored
data (``tests/test_powermodel_fit.py``), which independently corroborates the transcription; the
GPU-utilisation R² column is *not* reproduced by the per-run aggregates (see ``docs/powermodel.md``).

Table II's "±" is, to within bootstrap noise, the half-width of a 95 % percentile bootstrap interval
(our 2000-resample half-widths agree to ±0.01 in R² and ±0.1 in MAPE).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

CITATION = (
    "Enskat & Wiesner, 'Evaluating MFU as a Proxy for GPU Power for Energy-Aware Simulation of LLM Training', "
    "MASCOTS 2026, arXiv:2608.03880v1; values as transcribed by a third-party summary of the arXiv HTML "
    "(not checked against the PDF)"
)

_M = MappingProxyType

#: Table II: per-GPU OLS of power on MFU: R² ± half-width, MAPE % ± half-width, and R² of power on GPU
#: utilisation (None for the MI210, whose utilisation counter is binary).
TABLE2: Mapping[str, Mapping[str, float | None]] = _M(
    {
        "A100": _M({"r2": 0.74, "r2_pm": 0.03, "mape_pct": 11.0, "mape_pm": 0.7, "util_r2": 0.87}),
        "L40": _M({"r2": 0.80, "r2_pm": 0.03, "mape_pct": 7.8, "mape_pm": 0.5, "util_r2": 0.82}),
        "L4": _M({"r2": 0.37, "r2_pm": 0.03, "mape_pct": 3.5, "mape_pm": 0.5, "util_r2": 0.17}),
        "Quadro RTX 5000": _M({"r2": 0.84, "r2_pm": 0.02, "mape_pct": 12.5, "mape_pm": 1.4, "util_r2": 0.85}),
        "RTX 4070 Ti": _M({"r2": 0.68, "r2_pm": 0.06, "mape_pct": 12.5, "mape_pm": 1.1, "util_r2": 0.67}),
        "MI210": _M({"r2": 0.77, "r2_pm": 0.05, "mape_pct": 13.7, "mape_pm": 0.9, "util_r2": None}),
    }
)
#: Decimal places printed in the paper for each Table II column.
TABLE2_DECIMALS: Mapping[str, int] = _M({"r2": 2, "r2_pm": 2, "mape_pct": 1, "mape_pm": 1, "util_r2": 2})

#: Table III: residual SD as % of mean power: per-GPU fit, per-cell fits, cross-repeat noise floor.
TABLE3: Mapping[str, Mapping[str, float]] = _M(
    {
        "A100": _M({"sd_gpu_pct": 12.50, "sd_cell_pct": 2.13, "noise_pct": 1.08}),
        "L40": _M({"sd_gpu_pct": 9.02, "sd_cell_pct": 1.29, "noise_pct": 0.35}),
        "L4": _M({"sd_gpu_pct": 4.46, "sd_cell_pct": 1.00, "noise_pct": 0.71}),
        "Quadro RTX 5000": _M({"sd_gpu_pct": 12.81, "sd_cell_pct": 1.95, "noise_pct": 1.23}),
        "RTX 4070 Ti": _M({"sd_gpu_pct": 16.46, "sd_cell_pct": 2.21, "noise_pct": 1.66}),
        "MI210": _M({"sd_gpu_pct": 17.81, "sd_cell_pct": 2.87, "noise_pct": 0.20}),
    }
)
TABLE3_DECIMALS: Mapping[str, int] = _M({"sd_gpu_pct": 2, "sd_cell_pct": 2, "noise_pct": 2})

#: Table IV: mean MFU (%) and mean power (W) at batch 1 and batch 128.
TABLE4: Mapping[str, Mapping[str, float]] = _M(
    {
        "A100": _M({"mfu1_pct": 0.4, "mfu128_pct": 28.1, "power1_w": 189, "power128_w": 307}),
        "L40": _M({"mfu1_pct": 0.4, "mfu128_pct": 31.8, "power1_w": 200, "power128_w": 315}),
        "L4": _M({"mfu1_pct": 0.5, "mfu128_pct": 22.3, "power1_w": 63, "power128_w": 70}),
        "Quadro RTX 5000": _M({"mfu1_pct": 0.8, "mfu128_pct": 35.5, "power1_w": 111, "power128_w": 201}),
        "RTX 4070 Ti": _M({"mfu1_pct": 0.3, "mfu128_pct": 14.9, "power1_w": 97, "power128_w": 169}),
        "MI210": _M({"mfu1_pct": 1.2, "mfu128_pct": 44.3, "power1_w": 72, "power128_w": 148}),
    }
)
TABLE4_DECIMALS: Mapping[str, int] = _M({"mfu1_pct": 1, "mfu128_pct": 1, "power1_w": 0, "power128_w": 0})
