"""Progress of ``flopwatch run``: one rich bar on stderr over the whole run, in expected-seconds units."""

from __future__ import annotations

from typing import Any

from flopwatch.pipeline.plan import REAL_FIXED_OVERHEAD_S, Plan


class Progress:
    """One rich progress bar over the whole run, advanced in expected-seconds units (so the ETA is honest)."""

    def __init__(self, enabled: bool, total: float, console: Any = None) -> None:
        """``console``: where the bar draws (default: a rich Console on stderr; stdout stays for the results)."""
        self.enabled = enabled
        self._p: Any = None
        self._task: Any = None
        self._done = 0.0
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._p = Progress(
                TextColumn("{task.description}", style="bold", markup=False),  # labels print literally
                BarColumn(),
                TaskProgressColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                transient=False,
                console=console or Console(stderr=True),
            )
            self._p.start()
            self._task = self._p.add_task("starting", total=total)

    def stage(self, text: str) -> None:
        if self._p is not None:
            self._p.update(self._task, description=text)

    def advance(self, units: float) -> None:
        self._done += units
        if self._p is not None:
            self._p.update(self._task, advance=units)

    def close(self, done: bool = True) -> None:
        """Stop the bar: at "done 100 %" after a finished run; where it was, marked, after Ctrl-C or a failure."""
        if self._p is not None:
            if done:
                self._p.update(self._task, completed=self._p.tasks[0].total, description="done")
            else:
                desc = self._p.tasks[0].description
                self._p.update(self._task, description=f"stopped during: {desc}")
            self._p.stop()


#: Expected wall seconds of the analysis stages (2 shared CPU cores; figures dominate), the progress bar's units.
ANALYSIS_S = {"detect": 0.6, "calibrate": 0.2, "evaluate": 0.6, "threshold": 0.05, "figure": 0.7}
#: Wall seconds per simulated sample (sensor read, Sampler, TraceWriter) and to build the simulated device.
SIM_S_PER_SAMPLE, SIM_SETUP_S = 4e-4, 1.5


def prog_weight_sweep(sim: bool, plan: Plan, rate_hz: float = 10.0) -> float:
    """Progress units (expected wall seconds) of the sweep stage.

    On a real GPU the sweep takes the wall time the plan expects (start-up and analysis are counted separately);
    on the simulator it takes what sampling ``plan.expected_s`` virtual seconds costs.
    """
    if sim:
        return SIM_SETUP_S + SIM_S_PER_SAMPLE * plan.expected_s * rate_hz
    return plan.expected_s - REAL_FIXED_OVERHEAD_S


def analysis_units(n_figures: int = 8) -> float:
    a = ANALYSIS_S
    return a["detect"] + a["calibrate"] + a["evaluate"] + a["threshold"] + a["figure"] * n_figures
