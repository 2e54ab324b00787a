"""CPU and wall time of drawing a ``flopwatch run --quick``'s eight figures (issue: figures dominated the run).

Runs the quick simulated study once (figures off the clock), then redraws the run's and the evaluation's figures
``--repeat`` times into a scratch directory and prints the median CPU (process) and wall time per pass and per
figure. Usage: ``python benchmarks/bench_figures.py [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from flopwatch.detect import detect_workloads
    from flopwatch.estimate.features import FrontierGate
    from flopwatch.evaluate.splits import evaluate_models
    from flopwatch.pipeline import RunOptions, run_pipeline
    from flopwatch.records import load_records
    from flopwatch.report.estimate_figures import write_figures
    from flopwatch.report.mpl import pyplot
    from flopwatch.report.run_figures import write_run_figures
    from flopwatch.telemetry.trace import Trace

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        run_pipeline(RunOptions(outdir=out, device="sim:a100", quick=True, progress=False))
        trace = Trace.read(out / "trace.parquet")
        det = detect_workloads(trace)
        import json

        recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines() if x.strip()]
        rs = load_records(out / "records.jsonl", require=())
        rs = rs.subset([r for r in rs if r.net_energy_j is not None and r.duration_s is not None])
        dtypes = [r.dtype for r in rs if r.mean_util is not None and r.mean_util >= 0.8]
        gate = FrontierGate(min_util=0.8, precision=max(sorted(set(dtypes)), key=dtypes.count))
        gres = gate.apply(rs)
        ev = evaluate_models(rs, None, n_splits=200, n_train=10, seed=0, gate=gate)
        pyplot()  # the matplotlib import is paid once per process, outside the loop
        cpu, wall = [], []
        for i in range(args.repeat):
            d = Path(tmp) / f"figs{i}"
            c0, w0 = time.process_time(), time.perf_counter()
            n = len(write_run_figures(trace.samples, det, recs, gres, ev, d, simulated=True))
            n += len(write_figures(ev, d, watermark="SIMULATED"))
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
    c, w = statistics.median(cpu), statistics.median(wall)
    print(
        f"{n} figures: median CPU {c:.2f} s, wall {w:.2f} s per pass ({c / n * 1000:.0f} ms CPU per figure); "
        f"{args.repeat} passes"
    )


if __name__ == "__main__":
    main()
