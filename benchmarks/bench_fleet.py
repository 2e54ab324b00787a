"""Fleet estimation throughput through a real Prometheus: GPU-hours processed per second and peak memory, and how
both grow with the number of GPUs and with the hours of history.

Simulated fleets (``flopwatch.sim.dcgm``, every series labelled simulated) are written as OpenMetrics, backfilled
with promtool into one TSDB (one fleet per day of timestamps), and served by one ``prometheus`` on 127.0.0.1.
Each estimate runs in a fresh subprocess so its peak RSS is its own; Prometheus's CPU time is read from /proc.

    python benchmarks/bench_fleet.py                      # GPUs 16,32,64,128 × 6 h and 32 GPUs × 6,12,24 h
    python benchmarks/bench_fleet.py --gpus 1024 --hours-fixed 24 --sweep-hours '' --tsdb /tmp/t24  # the issue's size
    python benchmarks/bench_fleet.py --gpus 1024 --hours-fixed 24 --sweep-hours '' --tsdb /tmp/t24 --rules \
        --resolution both --slice-gpus 128,256,512 --slice-hours 6,12   # both paths, both resolutions, growth
    python benchmarks/bench_fleet.py --gpus 1024 --hours-fixed 24 --sweep-hours '' --tsdb /tmp/t24 --rules \
        --resolution span --repeat 10   # the spread of the headline row on this shared machine
    git archive main src | tar -x -C /tmp/base   # then, paired before/after against the same server:
    python benchmarks/bench_fleet.py --tsdb /tmp/t6 --baseline-src /tmp/base/src

The full 1024 GPUs × 24 h at 15 s is ≈ 83 M samples (≈ 26 GB of OpenMetrics); promtool backfills it in 20–30 min
on this 2-core machine (31 min on 2026-12-01 with another job on the second core; ``--tsdb`` keeps it for re-runs,
and ``--rules`` adds ≈ 1 min). Figures, what they mean and the limit: docs/fleet.md, "Scale".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Timing without tracemalloc (it slows allocation several-fold); memory as peak RSS over the baseline after
# imports (what the estimate itself allocates: answers in flight, GPU-jobs of a chunk, the output groups).
CHILD = r"""
import json, resource, sys, time
import numpy
from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet
ANSWER_KEYS = json.loads(sys.argv[5])
url, t0, t1, chunk = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
rules = sys.argv[6] if len(sys.argv) > 6 else "off"
kw = {"resolution": sys.argv[7]} if len(sys.argv) > 7 else {}
if len(sys.argv) > 8 and sys.argv[8]:
    kw["matchers"] = sys.argv[8]
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
w0, c0 = time.perf_counter(), time.process_time()
r = estimate_fleet(PrometheusClient(url), ReadPlan(t0, t1, gpus_per_chunk=chunk, rules=rules, **kw), by="pod")
wall, cpu = time.perf_counter() - w0, time.process_time() - c0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "gpu_hours": r.meta["gpu_hours"], "groups": len(r.groups),
                  "queries": r.meta["queries"], "bytes": r.meta["bytes_received"], "rss_growth_mb": rss - rss0,
                  "maxrss_mb": rss, "read_from": r.meta.get("read_from"), "start": r.meta["start"],
                  "answers": {g["key"]: [g.get(k) for k in ANSWER_KEYS] for g in r.groups}}))
"""
#: Per-group fields compared between --baseline-src and this tree (the paired runs must agree).
ANSWER_KEYS = ["energy_j", "estimate_flops", "lower_flops", "upper_flops", "pipe_estimate_flops", "gpu_hours"]


def _max_rel_diff(
    a: dict[str, list[float | None]], b: dict[str, list[float | None]], cols: tuple[int, ...] | None = None
) -> float:
    """Largest relative difference between two runs' per-group answers (inf when the groups differ); ``cols``:
    only these columns of :data:`ANSWER_KEYS`."""
    if a.keys() != b.keys():
        return float("inf")
    worst = 0.0
    for k, xs in a.items():
        for c, (x, y) in enumerate(zip(xs, b[k], strict=True)):
            if cols is not None and c not in cols:
                continue
            if x is None or y is None:
                if (x is None) != (y is None):
                    return float("inf")
                continue
            worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-300))
    return worst


def _cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _backfill_rules(tsdb: Path, spans: list[tuple[float, float]], want: str) -> bool:
    """Backfill flopwatch's 1 h recording rules over ``spans`` with promtool through a Prometheus over ``tsdb``;
    print its wall time and the Prometheus CPU time it took (what the rules cost at ingest, paid once here)."""
    import shutil

    from flopwatch.fleet.localprom import LocalPrometheus, find_tool
    from flopwatch.fleet.rules import rules_yaml
    from flopwatch.telemetry.prom_client import PrometheusClient

    done = tsdb / "bench_rules_manifest.json"
    have = json.loads(done.read_text()) if done.exists() else None
    fleets = json.loads(want)
    with LocalPrometheus(tsdb) as p:
        text = rules_yaml(3600, PrometheusClient(p.url).version()[0])
    # the rules (record → expression) are part of the manifest: records not there yet are backfilled; a record
    # whose expression changed is deleted first (its old series would otherwise be summed with the new ones)
    records = _records(text)
    old: dict[str, str] = {}
    if isinstance(have, dict) and have.get("fleets") == fleets:
        old = have.get("records", {})
        if isinstance(old, list):  # a manifest that kept names only
            old = {n: "?" for n in old}
    elif have is not None and have == fleets:  # manifest of a rules file before the job-level rules
        old = {n: e for n, e in records.items() if n.startswith("flopwatch:")}
    todo = {n for n, e in records.items() if old.get(n) != e}
    if not todo:
        print("# reusing the backfilled rule series")
        return False
    stale = sorted(n for n in todo if n in old)
    if stale:
        _delete_series(tsdb, stale)
    keep = _rules_subset(text, todo)
    with tempfile.TemporaryDirectory(prefix="bench_rules_") as d, LocalPrometheus(tsdb) as p:
        assert p.proc is not None
        # promtool evaluates a group at an offset hashed from its name and file path: one path for every backfill
        # into this TSDB keeps all the records on one window grid, as one rules file on a live server does
        rules = tsdb / "flopwatch-rules.yml"
        rules.write_text(keep)
        out = Path(d) / "blocks"
        w, pc0 = time.perf_counter(), _cpu_s(p.proc.pid)
        for t0, t1 in spans:
            subprocess.run(
                [
                    str(find_tool("promtool")),
                    "tsdb",
                    "create-blocks-from",
                    "rules",
                    f"--start={int(t0)}",  # from an hour before the data, promtool 2.42 wrote no blocks here (2026-12-01)
                    f"--end={int(t1 + 3600)}",
                    f"--url={p.url}",
                    f"--output-dir={out}",
                    "--quiet",
                    str(rules),
                ],
                check=True,
                capture_output=True,
                timeout=3600,
            )
        wall, pcpu = time.perf_counter() - w, _cpu_s(p.proc.pid) - pc0
        p.stop()  # before its blocks change
        blocks = [b for b in out.iterdir() if b.is_dir()]
        for b in blocks:
            shutil.move(str(b), tsdb / b.name)
        n = len(blocks)
    done.write_text(json.dumps({"fleets": fleets, "records": records}))
    print(
        f"# rule backfill (promtool create-blocks-from rules, 1 h group, {len(todo)} records): {wall:.1f} s "
        f"wall, {pcpu:.1f} Prometheus CPU-s, {n} blocks — what evaluating them over this history costs Prometheus"
    )
    return True


def _compacted(tsdb: Path, limit_s: float = 900.0) -> None:
    """Wait (Prometheus running over ``tsdb``) until it has merged freshly added blocks: their count has not
    fallen for 40 s. A long-running server does this within minutes; measuring hundreds of small blocks would
    measure the backfill, not the reader."""
    n = lambda: sum(1 for b in tsdb.iterdir() if (b / "meta.json").exists())  # noqa: E731
    t0, last, since = time.monotonic(), n(), time.monotonic()
    merged = last < 20
    # Prometheus 2.42 starts compacting about a minute after start: wait for the first merge, then for quiet
    while time.monotonic() - t0 < limit_s and not (
        time.monotonic() - since >= 40 and (merged or time.monotonic() - t0 > 240)
    ):
        time.sleep(5)
        k = n()
        if k < last:
            last, since, merged = k, time.monotonic(), True
    print(f"# compaction: {last} blocks after {time.monotonic() - t0:.0f} s")


def _records(text: str) -> dict[str, str]:
    """record → expression of a rules file."""
    import yaml

    return {r["record"]: r["expr"] for g in yaml.safe_load(text)["groups"] for r in g["rules"]}


def _delete_series(tsdb: Path, names: list[str]) -> None:
    """Delete these series names from ``tsdb`` (TSDB admin API) and rewrite the blocks without them."""
    import urllib.parse
    import urllib.request

    from flopwatch.fleet.localprom import LocalPrometheus

    with LocalPrometheus(tsdb, admin=True) as p:
        match = urllib.parse.urlencode({"match[]": '{__name__=~"' + "|".join(map(re.escape, names)) + '"}'})
        for path in (f"/api/v1/admin/tsdb/delete_series?{match}", "/api/v1/admin/tsdb/clean_tombstones"):
            urllib.request.urlopen(urllib.request.Request(p.url + path, method="POST"), timeout=3600).close()
    print(f"# deleted {len(names)} rule series whose expression changed")


def _rules_subset(text: str, records: set[str]) -> str:
    """The rules file ``text`` keeping only the rules that record ``records`` (same group: same name, interval)."""
    import yaml

    doc = yaml.safe_load(text)
    for g in doc["groups"]:
        g["rules"] = [r for r in g["rules"] if r["record"] in records]
    return yaml.safe_dump(doc, sort_keys=False, width=1000)


def _print_row(tag: str, res: str, g: int, h: float, r: dict, note: str) -> None:
    print(
        f"{tag:4s}  {res:6s}  {g:4d}  {h:5.1f}  {r['gpu_hours']:6.1f}  {r['wall_s']:6.2f}  "
        f"{r['cpu_s']:5.2f}  {r['prom_cpu_s']:10.2f}  {r['gpu_hours'] / r['wall_s']:11.0f}  "
        f"{r['rss_growth_mb']:13.1f}  {r['maxrss_mb']:9.0f}  {r['queries']:7d}  "
        f"{r['bytes'] / 1e6:7.2f}  {r['load1']:5.2f}  {r['utc']}" + note
    )


def _summary(rows: list[dict], what: str) -> None:
    """Largest run's rate (and its spread over ``--repeat``) and the marginal rates (least squares over the runs)
    of one (source, resolution)."""
    import numpy as np

    big_gh = max(r["gpu_hours"] for r in rows)
    reps = [r["gpu_hours"] / r["wall_s"] for r in rows if r["gpu_hours"] == big_gh]
    if len(reps) > 1:
        print(
            f"# {what}: largest run over {len(reps)} repeats: {min(reps):.0f} / {float(np.median(reps)):.0f} / "
            f"{max(reps):.0f} GPU-h/s (min / median / max), ≥ 10 000 in {sum(x >= 10_000 for x in reps)}"
        )
    rows = [r for r in rows if r.get("rep", 0) == 0]
    gh = np.array([r["gpu_hours"] for r in rows])

    def per_gpu_h(key: str) -> float:
        """Least-squares slope of ``key`` on GPU-hours: the marginal cost, fixed costs removed."""
        y = np.array([r[key] for r in rows])
        slope = float(np.polyfit(gh, y, 1)[0]) if len(rows) > 1 else float("nan")
        return 1.0 / slope if slope > 0 else float("inf")

    big = max(rows, key=lambda r: r["gpu_hours"])
    fixed = min(r["cpu_s"] for r in rows)
    print(
        f"# {what}: largest run {big['gpu_hours']:.0f} GPU-h at {big['gpu_hours'] / big['wall_s']:.0f} GPU-h/s end "
        f"to end (imports excluded; discovery, the rule checks and the built-in power model's lines included: "
        f"≥ {fixed:.1f} CPU-s per run)"
    )
    if len(rows) < 2:
        return
    w, c, pc = per_gpu_h("wall_s"), per_gpu_h("cpu_s"), per_gpu_h("prom_cpu_s")
    print(
        f"# {what}: marginal {w:.0f} GPU-h per wall-second, {c:.0f} GPU-h per flopwatch CPU-second, {pc:.0f} GPU-h "
        "per Prometheus CPU-second (least squares over the runs)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", default="16,32,64,128", help="fleet sizes at --hours-fixed")
    ap.add_argument("--hours-fixed", type=float, default=6.0)
    ap.add_argument("--sweep-hours", default="6,12,24", help="history lengths at --gpus-fixed ('' to skip)")
    ap.add_argument("--gpus-fixed", type=int, default=32)
    ap.add_argument("--chunk", type=int, default=32, help="GPUs per query chunk")
    ap.add_argument("--device", default="h100")
    ap.add_argument("--tsdb", default=None, help="keep the backfilled TSDB here and reuse it when it matches")
    ap.add_argument(
        "--baseline-src",
        default=None,
        help="a second source tree (e.g. `git archive main src | tar -x -C /tmp/base`, then /tmp/base/src): each "
        "size runs with it and with this tree alternately against the same Prometheus (paired before/after)",
    )
    ap.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="seconds to let Prometheus compact the blocks before measuring (a long-running server merges "
        "promtool's 2 h blocks within minutes); 0 (default): wait until it has merged the blocks this run added "
        "or more than 20 blocks; -1: measure them as backfilled",
    )
    ap.add_argument(
        "--rules",
        action="store_true",
        help="also backfill flopwatch's recording rules (promtool tsdb create-blocks-from rules, evaluated by the "
        "served Prometheus: the ingest-time cost is printed) and measure the rules path (--rules require) beside "
        "the raw path over the same span (the rule grid), comparing their answers",
    )
    ap.add_argument(
        "--resolution",
        choices=("window", "span", "both"),
        default="window",
        help="fleet estimate resolution (flopwatch.fleet.span); both: each run at window then at span resolution, "
        "with span's largest relative difference from window's answers",
    )
    ap.add_argument(
        "--slice-gpus",
        default="",
        help="also measure the first N GPUs of the largest fleet (comma-separated; whole nodes, by Hostname)",
    )
    ap.add_argument("--slice-hours", default="", help="also measure the first H hours of the largest fleet")
    ap.add_argument(
        "--warm",
        type=int,
        default=1,
        help="untimed runs of each measurement first (default 1: a freshly started Prometheus answers its first "
        "queries up to 2 × slower, and a long-running one is warm; 0: measure first touch)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="timed runs of each measurement (each printed; the summary gives min / median / max of the largest "
        "run's GPU-h/s): this shared machine's speed drifts by up to 1.75 × within the hour",
    )
    args = ap.parse_args()

    from flopwatch.fleet.localprom import LocalPrometheus, backfill
    from flopwatch.sim.dcgm import SimulatedFleet, random_schedule

    fleets = [(int(g), args.hours_fixed) for g in args.gpus.split(",") if g]
    if args.sweep_hours:
        fleets.append((args.gpus_fixed, max(float(h) for h in args.sweep_hours.split(","))))
    load = os.getloadavg()
    print(
        f"# machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (shared)"
    )
    with tempfile.TemporaryDirectory(prefix="bench_fleet_") as d:
        tsdb = Path(args.tsdb) if args.tsdb else Path(d) / "tsdb"
        manifest = tsdb / "bench_manifest.json"
        want = json.dumps([list(f) for f in fleets] + [args.device])
        reuse = manifest.exists() and manifest.read_text() == want
        walls = {}
        for i, (g, h) in enumerate(fleets):
            wall0 = 1.7e9 + i * 2 * 86400
            walls[(g, h)] = wall0
            if reuse:
                continue
            om = Path(d) / f"f{i}.om"
            fleet = SimulatedFleet(
                g, h, random_schedule(g, h, seed=i), device=args.device, wall0=wall0, seed=i
            )
            w1 = w2 = 0.0
            size = 0
            for g0 in range(0, g, 128):  # ≤ 128 GPUs per file: promtool holds a file's samples in memory
                w = time.perf_counter()
                fleet.write_openmetrics(om, gpus=range(g0, min(g, g0 + 128)))
                w1 += time.perf_counter() - w
                size += om.stat().st_size
                w = time.perf_counter()
                backfill(om, tsdb, timeout_s=3600)
                w2 += time.perf_counter() - w
            print(
                f"# fleet {g} GPUs × {h:g} h: {size / 1e6:.0f} MB OpenMetrics written in {w1:.1f} s, "
                f"backfilled in {w2:.1f} s"
            )
            om.unlink()
        if not reuse:
            manifest.write_text(want)
            (tsdb / "bench_rules_manifest.json").unlink(missing_ok=True)  # rules of other data
        else:
            print(f"# reusing the backfilled TSDB in {tsdb}")
        fresh = not reuse
        if args.rules:
            fresh |= _backfill_rules(tsdb, [(w, w + h * 3600) for (g, h), w in walls.items()], want)
        runs = [
            (g, args.hours_fixed, walls[(g, args.hours_fixed)])
            for g, _ in fleets
            if (g, args.hours_fixed) in walls
        ]
        runs = list(dict.fromkeys(runs))
        if args.sweep_hours:
            w0 = walls[(args.gpus_fixed, max(float(h) for h in args.sweep_hours.split(",")))]
            runs += [(args.gpus_fixed, float(h), w0) for h in args.sweep_hours.split(",")]
        # slices of the largest fleet on the same server: its first G GPUs (whole nodes, by Hostname) and its
        # first H hours, so that growth with GPUs and with hours is measured without backfilling more fleets
        big_g, big_h = max(fleets)
        runs4 = [(g, h, w0, "") for g, h, w0 in runs]
        for g in (int(x) for x in args.slice_gpus.split(",") if x):
            nodes = "|".join(f"node-{n:04d}" for n in range(max(1, g // 8)))
            runs4.append((g, big_h, walls[(big_g, big_h)], f'Hostname=~"{nodes}"'))
        for h in (float(x) for x in args.slice_hours.split(",") if x):
            runs4.append((big_g, h, walls[(big_g, big_h)], ""))
        srcs = [("this", str(Path(__file__).resolve().parents[1] / "src"))]
        if args.rules:  # rules first: its start (on the rule grid) is the span the raw run reads too
            srcs = [("rule", srcs[0][1]), ("raw", srcs[0][1])]
        elif args.baseline_src:
            srcs.insert(0, ("base", str(Path(args.baseline_src).resolve())))
        print(
            "src   res     gpus  hours  gpu_h   wall_s  cpu_s  prom_cpu_s  gpu_h_per_s  rss_growth_MB  maxrss_MB  queries  "
            "MB_recv  load1  UTC"
        )
        rows = []
        base_answers: dict[str, list[float | None]] = {}
        with LocalPrometheus(tsdb) as p:
            assert p.proc is not None
            if args.settle > 0:
                time.sleep(args.settle)
            elif args.settle == 0 and (
                fresh or sum(1 for b in tsdb.iterdir() if (b / "meta.json").exists()) > 20
            ):
                _compacted(
                    tsdb
                )  # blocks added (in this run or an interrupted one): let the server merge them first
            blocks = sum(1 for b in tsdb.iterdir() if (b / "meta.json").exists())
            print(f"# Prometheus serves {blocks} blocks")
            resolutions = ["window", "span"] if args.resolution == "both" else [args.resolution]
            for g, h, w0, sel in runs4:
                t_start = w0
                for tag, src in srcs:
                    win_answers: dict[str, list[float | None]] = {}
                    for res in resolutions:
                        argv = [
                            sys.executable,
                            "-c",
                            CHILD,
                            p.url,
                            str(t_start),
                            str(w0 + h * 3600),
                            str(args.chunk),
                            json.dumps(ANSWER_KEYS),
                            {"rule": "require", "raw": "off"}.get(tag, "off"),
                            res,
                            sel,
                        ]
                        env = {**os.environ, "PYTHONPATH": src}
                        for _ in range(args.warm):  # untimed: a long-running server has the data warm
                            subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
                        for rep in range(max(1, args.repeat)):
                            pc0 = _cpu_s(p.proc.pid)
                            out = subprocess.run(
                                argv, capture_output=True, text=True, env=env, check=True
                            ).stdout
                            r = json.loads(out)
                            r |= {"src": tag, "resolution": res, "gpus": g, "hours": h, "rep": rep}
                            r["prom_cpu_s"] = _cpu_s(p.proc.pid) - pc0
                            r["load1"] = os.getloadavg()[0]
                            r["utc"] = time.strftime("%H:%M:%S", time.gmtime())
                            if rep < args.repeat - 1:  # the repeats: their times only
                                r.pop("answers")
                                if tag != "base":
                                    rows.append(r)
                                _print_row(tag, res, g, h, r, "")
                        answers = r.pop("answers")
                        if tag == "rule" and res == resolutions[0]:
                            from datetime import datetime

                            t_start = datetime.fromisoformat(r["start"].replace("Z", "+00:00")).timestamp()
                        note = ""
                        if res == "window" and len(resolutions) > 1:
                            win_answers = answers
                        elif res == "span" and win_answers:
                            # per answer: the built-in model's upper bound jumps to the peak where a cell's line
                            # saturates, so a tiny energy difference can move a bound a lot (docs/fleet.md)
                            d = {
                                name: _max_rel_diff(win_answers, answers, cols)
                                for name, cols in (
                                    ("energy", (0,)),
                                    ("estimate", (1,)),
                                    ("bounds", (2, 3)),
                                    ("pipe", (4,)),
                                    ("gpu_h", (5,)),
                                )
                            }
                            r["max_rel_diff_vs_window"] = d
                            note = "  span vs window, largest relative difference: " + ", ".join(
                                f"{k} {v:.1e}" for k, v in d.items()
                            )
                        if tag in ("base", "rule") and res == resolutions[0]:
                            base_answers = answers
                        elif (args.baseline_src or args.rules) and res == resolutions[0]:
                            r["max_rel_diff_vs_base"] = _max_rel_diff(base_answers, answers)
                            note += f"  answers differ from {srcs[0][0]} by ≤ {r['max_rel_diff_vs_base']:.1e}"
                        if tag != "base":
                            rows.append(r)
                        _print_row(tag, res, g, h, r, note)
        for src_tag, res in dict.fromkeys((r["src"], r["resolution"]) for r in rows):
            _summary([r for r in rows if r["src"] == src_tag and r["resolution"] == res], f"{src_tag}/{res}")
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
