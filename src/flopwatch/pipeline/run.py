"""``run_pipeline``: the orchestrator of ``flopwatch run`` — it sequences the stages and does nothing else.

device → plan → prepare DIR → trace (executor) → analysis (detect → join → gate → calibrate → evaluate → verdict →
figures) → summary → report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from flopwatch.errors import FlopwatchError
from flopwatch.pipeline.analyse import Stages, analyse
from flopwatch.pipeline.device import resolve_device
from flopwatch.pipeline.execute import Executor, executor_for, save_unjoined
from flopwatch.pipeline.layout import RECORDS_FILE, SUMMARY_FILE, TRACE_FILE, prepare_outdir, write_json
from flopwatch.pipeline.plan import RunOptions, plan_run
from flopwatch.pipeline.progress import Progress, analysis_units, prog_weight_sweep
from flopwatch.pipeline.summary import build_summary, failed_summary


def run_pipeline(
    opts: RunOptions,
    *,
    log: Callable[[str], None] | None = None,
    executor: Executor | None = None,
    stages: Stages | None = None,
) -> dict[str, Any]:
    """Run the whole study. Returns the summary (also written to summary.json, then report.html).

    ``executor`` plays the plan on the device (default: the simulator or the real GPU, by ``opts.device``);
    ``stages`` replaces analysis stage functions. Both exist so tests can inject fakes.
    """
    t_start = time.perf_counter()
    wall_start = time.time()
    say = log or (lambda s: None)
    outdir = opts.outdir
    choice = resolve_device(opts.device)
    plan = plan_run(choice, opts)  # before touching DIR: a bad --sweep leaves nothing behind
    prepare_outdir(outdir, opts.force)
    execute = executor or executor_for(choice)
    say(f"device: {choice.label}: {choice.reason}")  # before the bar starts: never on the bar's line
    prog = Progress(opts.progress, prog_weight_sweep(choice.simulated, plan, opts.rate_hz) + analysis_units())
    try:
        prog.stage(f"planned {len(plan.workloads)} workloads ({plan.sweep_name}) on {choice.label}")
        ex = execute(choice, plan, opts, prog, outdir / TRACE_FILE)
        try:
            analysis = analyse(choice, plan, opts, ex, prog, stages)
            summary = build_summary(choice, plan, opts, ex, analysis)
        except Exception as e:
            # Minutes of GPU time are on disk: keep the trace and the ground truth (appended unjoined if the
            # analysis failed before writing records.jsonl), say what failed in summary.json and the report,
            # then raise (an InputError prints one line; anything else is a bug and keeps its traceback).
            if not (outdir / RECORDS_FILE).exists():
                reason = str(e) if isinstance(e, FlopwatchError) else f"{type(e).__name__}: {e}"
                save_unjoined(outdir / RECORDS_FILE, ex.records, ex.failures, f"analysis failed: {reason}")
            summary = failed_summary(choice, plan, opts, ex, e)
            _finish(summary, outdir, t_start, wall_start)
            raise
    except BaseException:
        prog.close(done=False)  # Ctrl-C or a failure: the bar stops where it was, never at "done 100 %"
        raise
    prog.close()
    _finish(summary, outdir, t_start, wall_start)
    return summary


def _finish(summary: dict[str, Any], outdir: Any, t_start: float, wall_start: float) -> None:
    """Timing keys, summary.json, then report.html (the report states the final wall time: written last)."""
    from flopwatch.report.html import write_report

    summary["wall_time_s"] = time.perf_counter() - t_start
    summary["started_wall"] = wall_start
    write_json(outdir / SUMMARY_FILE, summary)
    write_report(outdir, summary)
