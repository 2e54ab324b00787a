"""Fleet estimates on raw dcgm-exporter series: GPU-hours per Prometheus CPU-second and per flopwatch CPU-second,
and flopwatch's peak memory as the fleet grows.

Three measurements (results: benchmarks/RESULTS.md, section "Fleet"):

* ``prometheus``: a SIMULATED fleet (``flopwatch.sim.dcgm``, every series labelled simulated) is written as
  OpenMetrics in slices of 128 GPUs, backfilled with promtool into one TSDB (kept under ``--tsdb`` for re-runs) and
  served by one ``prometheus`` on 127.0.0.1 with its default ``--query.max-samples``. Each estimate runs in a fresh
  subprocess (its own peak RSS); Prometheus's CPU time is read from /proc before and after. Sizes below the whole
  fleet are slices of it (``--selector`` on the hosts). The bare per-pod energy query an auditor could type
  (``sum by (pod) (increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[…]))``) is timed alongside for scale.
* ``recorded``: the same estimate with Prometheus off the machine. Each variant's estimate is run once against
  Prometheus with every HTTP exchange recorded (bytes as the socket gave them); Prometheus's CPU for those requests
  alone is then measured by sending them again, read but not decoded; and each estimate is timed in a fresh
  subprocess against a local server that replays the recording. On this 2-core machine a Prometheus answering
  beside flopwatch slows flopwatch's every CPU-second (the same replayed estimate costs ≈ 1.6 × the CPU with a busy
  Prometheus on the other core: RESULTS.md); an auditor's Prometheus runs on another machine. ``--instructions``
  also counts one estimate's instructions under valgrind (callgrind): a count, which the machine's load and speed
  do not move.
* ``replicate``: flopwatch's own CPU time and peak RSS from 128 to 10,000 GPUs without a Prometheus. One simulated
  node-day is read through Prometheus once; a replaying client then serves those verified window answers for any
  number of copies of the node (new UUIDs, hosts and pods per copy), so the reader, fold and assessment run on the
  full fleet's answers. Prometheus's own cost is not in these rows.

    python benchmarks/bench_fleet.py prometheus --gpus 1024 --hours 24 --tsdb /tmp/fleet1024 --slices 128,512
    python benchmarks/bench_fleet.py prometheus --gpus 1024 --hours 24 --tsdb /tmp/fleet1024 --slices 128 \
        --repeat 5 --compare before=/tmp/before/src,after=src

``--compare NAME=SRC,…`` runs each estimate once per variant (``PYTHONPATH=SRC``: e.g. a ``git archive`` of an
older commit's ``src``), alternating variants within each repeat on the same server, and prints each variant's
medians: the machine is shared, so only side-by-side medians compare two versions fairly.
    python benchmarks/bench_fleet.py recorded --gpus 1024 --hours 24 --tsdb /tmp/fleet1024 --repeat 5 \
        --compare before=/tmp/before/src,after=src [--instructions]
    python benchmarks/bench_fleet.py replicate --gpus 128,1024,10000 --hours 24
"""

from __future__ import annotations

import argparse
import atexit
import http.server
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # prom_helpers: test infrastructure

if TYPE_CHECKING:
    from flopwatch.telemetry.prom_client import Columns

WALL0 = 1_700_000_000.0

CHILD = r"""
import json, pickle, resource, sys, time
from flopwatch.fleet import PrometheusClient, ReadPlan, estimate_fleet
url, t0, t1, sel = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
reps, record = (int(sys.argv[5]), sys.argv[6]) if len(sys.argv) > 6 else (1, "")
if record:  # keep every exchange as the socket gave it, for the recorded server (`recorded` mode)
    import flopwatch.telemetry.prom_client as PC
    real, store = PC.PrometheusClient._exchange, {}
    def exchange(self, method, target, body, headers, guard):
        r = real(self, method, target, body, headers, guard)
        store[(method, target, body)] = (r[0], r[1], bytes(r[2]))
        return r
    PC.PrometheusClient._exchange = exchange
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
for _ in range(reps):  # several: the instruction count of one estimate is the difference of two runs
    w0, c0 = time.perf_counter(), time.process_time()
    r = estimate_fleet(PrometheusClient(url, timeout_s=600), ReadPlan(t0, t1, matchers=sel), by="pod")
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
if record:
    pickle.dump(store, open(record, "wb"))
print(json.dumps({"wall_s": wall, "cpu_s": cpu,
                  "gpu_hours": r.meta["gpu_hours"], "groups": len(r.groups), "queries": r.meta["queries"],
                  "max_samples_per_query": r.meta["max_samples_per_query"], "bytes": r.meta["bytes_received"],
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "rss0_mb": rss0,
                  "fleet_energy_j": r.fleet["energy_j"], "source": sys.modules["flopwatch"].__file__}))
"""


_PYC = tempfile.mkdtemp(prefix="fleet-bench-pyc-")
atexit.register(shutil.rmtree, _PYC, ignore_errors=True)
_COMPILED: set[str] = set()


def _env(src: str = "") -> dict[str, str]:
    """The timed child's environment: ``src`` first on the path (a ``--compare`` variant), its sources
    byte-compiled once into a private cache, as ``pip install`` leaves them. This machine sets
    PYTHONDONTWRITEBYTECODE, so otherwise every child would compile the modules the estimate imports lazily
    inside the timed call (≈ 0.05 CPU-s, the same for every fleet size)."""
    path = str(Path(src).resolve()) if src else str(Path(__file__).resolve().parents[1] / "src")
    env = os.environ | {"PYTHONPYCACHEPREFIX": _PYC} | ({"PYTHONPATH": path} if src else {})
    if path not in _COMPILED:
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", path], env=env, check=True, capture_output=True
        )
        _COMPILED.add(path)
    return env


def _cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def build(tsdb: Path, gpus: int, hours: float, slice_gpus: int = 128) -> None:
    """Simulate ``gpus`` GPUs × ``hours`` and backfill them into ``tsdb`` in slices (disk: one slice at a time)."""
    from flopwatch.sim.dcgm import SimulatedFleet, random_schedule
    from prom_helpers import backfill

    done = tsdb / "flopwatch-bench.json"
    want = {"gpus": gpus, "hours": hours}
    if done.exists() and json.loads(done.read_text()) == want:
        return
    fleet = SimulatedFleet(
        gpus, hours, random_schedule(gpus, hours, seed=0), device="h100", seed=0, wall0=WALL0
    )
    with tempfile.TemporaryDirectory(dir=tsdb.parent) as d:
        for a in range(0, gpus, slice_gpus):
            t = time.perf_counter()
            om = Path(d) / "slice.om"
            fleet.write_openmetrics(om, gpus=range(a, min(gpus, a + slice_gpus)))
            backfill(om, tsdb, timeout_s=7200)
            om.unlink()
            print(f"  GPUs {a}–{min(gpus, a + slice_gpus) - 1}: {time.perf_counter() - t:.0f} s", flush=True)
    done.write_text(json.dumps(want))


def run_prometheus(args: argparse.Namespace) -> list[dict]:
    from flopwatch.telemetry.prom_client import PrometheusClient
    from prom_helpers import LocalPrometheus

    tsdb = Path(args.tsdb)
    tsdb.mkdir(parents=True, exist_ok=True)
    build(tsdb, args.gpus, args.hours)
    t1 = WALL0 + args.hours * 3600
    rows = []
    variants = [tuple(v.split("=", 1)) for v in args.compare.split(",")] if args.compare else [("", "")]
    with LocalPrometheus(tsdb, ready_timeout_s=600) as p:
        assert p.proc is not None
        for n in [int(x) for x in args.slices.split(",") if x] + [args.gpus]:
            nodes = -(-n // 8)
            sel = (
                ""
                if n == args.gpus
                else 'Hostname=~"' + "|".join(f"node-{i:04d}" for i in range(nodes)) + '"'
            )
            for _ in range(args.repeat):
                for name, src in variants:
                    env = _env(src)
                    c0 = _cpu_s(p.proc.pid)
                    out = subprocess.run([sys.executable, "-c", CHILD, p.url, str(WALL0), str(t1), sel],
                                     capture_output=True, text=True, check=True, env=env)  # fmt: skip
                    r = json.loads(out.stdout) | {
                        "gpus": n,
                        "hours": args.hours,
                        "prom_cpu_s": _cpu_s(p.proc.pid) - c0,
                        "variant": name,
                        "load1": os.getloadavg()[0],  # the machine is shared: say how busy it was
                    }
                    # the bare query for scale: per-pod energy over the range, one instant query
                    c0, w0 = _cpu_s(p.proc.pid), time.perf_counter()
                    m = f"{{{sel}}}" if sel else ""
                    PrometheusClient(p.url, timeout_s=600).query(
                        f"sum by (pod) (increase(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{m}[{int(args.hours * 3600)}s]))",
                        t1,
                    )
                    r |= {"bare_wall_s": time.perf_counter() - w0, "bare_prom_cpu_s": _cpu_s(p.proc.pid) - c0}
                    rows.append(r)
                    _print(r)
    if args.compare:
        _medians(rows)
    return rows


class _Recorded(http.server.BaseHTTPRequestHandler):
    """Answers each request with the bytes Prometheus gave for it in the recording (``store``): the estimate's own
    socket reads, decoding and checks run as against Prometheus, with no server beside it on these 2 cores."""

    protocol_version = "HTTP/1.1"
    store: dict = {}

    def _answer(self, body: bytes | None) -> None:
        got = self.store.get((self.command, self.path, body))
        if (
            got is None
        ):  # a request the recording lacks: the estimate exits 2 naming it, not a dropped connection
            got = (
                404,
                "Not Recorded",
                b'{"status":"error","errorType":"bench","error":"request not in the recording"}',
            )
        status, reason, raw = got
        self.send_response(status, reason)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:  # noqa: N802 (http.server's names)
        self._answer(None)

    def do_POST(self) -> None:  # noqa: N802
        self._answer(self.rfile.read(int(self.headers["Content-Length"])))

    def log_message(self, *a: object) -> None:
        pass


def run_recorded(args: argparse.Namespace) -> list[dict]:
    """Each variant's estimate recorded once against Prometheus, then timed against a server that replays the
    recording: flopwatch's CPU without Prometheus competing for the same cores (it runs on another machine in
    practice). ``--instructions``: each variant also under ``valgrind --tool=callgrind``, one estimate's instruction
    count (two estimates in one process less one: imports apart) — a count, not a time, so the machine's load and
    speed do not move it."""
    import statistics
    import threading
    import urllib.request

    from prom_helpers import LocalPrometheus

    tsdb = Path(args.tsdb)
    tsdb.mkdir(parents=True, exist_ok=True)
    build(tsdb, args.gpus, args.hours)
    t1 = WALL0 + args.hours * 3600
    variants = [tuple(v.split("=", 1)) for v in args.compare.split(",")] if args.compare else [("", "")]
    rec = Path(tempfile.mkdtemp(prefix="fleet-recorded-"))
    atexit.register(shutil.rmtree, rec, ignore_errors=True)
    prom: dict[str, list[float]] = {}
    with LocalPrometheus(tsdb, ready_timeout_s=600) as p:
        assert p.proc is not None
        for name, src in variants:  # each variant its own queries (another version may ask others)
            subprocess.run([sys.executable, "-c", CHILD, p.url, str(WALL0), str(t1), "", "1", str(rec / f"{name}.pkl")],
                           capture_output=True, check=True, env=_env(src))  # fmt: skip
        stores = {name: pickle.loads((rec / f"{name}.pkl").read_bytes()) for name, _ in variants}
        # Prometheus's own CPU for each variant's requests, sent one by one and read but not decoded: no client
        # work beside the server (the `prometheus` mode's figure includes the decoding on the other core)
        for _ in range(args.repeat):
            for name, _src in variants:
                c0 = _cpu_s(p.proc.pid)
                for method, target, body in stores[name]:
                    req = urllib.request.Request(p.url + target, data=body, method=method)
                    urllib.request.urlopen(req, timeout=600).read()
                prom.setdefault(name, []).append(_cpu_s(p.proc.pid) - c0)
    gh = args.gpus * args.hours
    for name, cs in prom.items():
        print(f"  {name or 'tree'}: Prometheus CPU for its requests alone {statistics.median(cs):.2f} s (median of "
              f"{len(cs)}: {', '.join(f'{c:.2f}' for c in cs)}) → {gh / statistics.median(cs):.0f} GPU-h per Prometheus "
              "CPU-second", flush=True)  # fmt: skip
    urls = {}
    for name, _src in variants:
        handler = type("Handler", (_Recorded,), {"store": stores[name]})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        urls[name] = f"http://127.0.0.1:{server.server_address[1]}"
    rows = []
    for _ in range(args.repeat):
        for name, src in variants:
            out = subprocess.run([sys.executable, "-c", CHILD, urls[name], str(WALL0), str(t1), ""],
                                 capture_output=True, text=True, check=True, env=_env(src))  # fmt: skip
            r = json.loads(out.stdout) | {"gpus": args.gpus, "hours": args.hours, "prom_cpu_s": None,
                                          "variant": name, "load1": os.getloadavg()[0]}  # fmt: skip
            rows.append(r)
            _print(r)
    if args.compare:
        _medians(rows)
    if args.instructions:
        for name, src in variants:
            ir = []
            for reps in ("1", "2"):
                cg = rec / f"cg-{name}-{reps}.out"
                subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={cg}", sys.executable, "-c",
                                CHILD, urls[name], str(WALL0), str(t1), "", reps, ""],
                               capture_output=True, check=True, env=_env(src))  # fmt: skip
                ir.append(int(re.search(r"^summary: (\d+)", cg.read_text(), re.M).group(1)))
            print(f"  {name or 'tree'}: {ir[1] - ir[0]:,} instructions per estimate ({ir[0]:,} for a process "
                  "that imports and runs one)", flush=True)  # fmt: skip
    return rows


def _medians(rows: list[dict]) -> None:
    """Each (size, variant)'s median wall, CPU and peak RSS over the repeats."""
    import statistics

    print("medians:", flush=True)
    for key in sorted(
        {(r["gpus"], r["variant"]) for r in rows},
        key=lambda k: (k[0], [r["variant"] for r in rows].index(k[1])),
    ):
        rs = [r for r in rows if (r["gpus"], r["variant"]) == key]
        med = {
            k: statistics.median(r[k] or 0.0 for r in rs)
            for k in ("wall_s", "cpu_s", "maxrss_mb", "prom_cpu_s", "load1")
        }
        gh = rs[0]["gpu_hours"]
        prom = (
            f"Prometheus CPU {med['prom_cpu_s']:5.2f} s → {gh / med['prom_cpu_s']:6.0f}, "
            if med["prom_cpu_s"]
            else ""
        )
        print(
            f"  {key[0]:>6} GPUs {key[1]:>8} ({len(rs)} runs): wall {med['wall_s']:6.2f} s, flopwatch CPU "
            f"{med['cpu_s']:5.2f} s → {gh / med['cpu_s']:7.0f} GPU-h/CPU-s, {prom}peak RSS {med['maxrss_mb']:4.0f} MB, "
            f"{rs[0]['groups']} groups, energy {rs[0]['fleet_energy_j']:.6e} J, load {med['load1']:.1f}",
            flush=True,
        )
    # the machine's speed drifts (the same tree measured 1.0–2.1 CPU-s within minutes): each variant's CPU over the
    # first variant's in the same repeat, run back to back, is what compares two versions
    first = rows[0]["variant"]
    for key in sorted({(r["gpus"], r["variant"]) for r in rows if r["variant"] != first}):
        base = [r for r in rows if (r["gpus"], r["variant"]) == (key[0], first)]
        mine = [r for r in rows if (r["gpus"], r["variant"]) == key]
        ratios = sorted(b["cpu_s"] / a["cpu_s"] for a, b in zip(base, mine, strict=False))
        print(
            f"  {key[0]:>6} GPUs {key[1]:>8} ÷ {first}, flopwatch CPU per repeat: median {statistics.median(ratios):.2f} "
            f"({', '.join(f'{x:.2f}' for x in ratios)})",
            flush=True,
        )


class ReplayClient:
    """Serves one node's verified window answers for any number of copies of it (``GPU-…-cCCCC`` UUIDs)."""

    display_url = "replay://simulated-node"
    bytes_received = 0

    def __init__(
        self, answers: dict[str, dict], uuids: list[str], copies: int, version: tuple[int, int]
    ) -> None:
        self.answers, self.uuids, self.copies, self._version = answers, uuids, copies, version

    def version(self) -> tuple[int, int]:
        return self._version

    def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        if label == "__name__":
            from flopwatch.telemetry import dcgm_metrics as M

            # every replicated series has its UUID: none answers the reader's query for series without one
            return [m.name for m in M.TABLE] if "DCGM" in match and 'UUID=""' not in match else []
        if label == "UUID":
            return [f"{u}-c{c:05d}" for c in range(self.copies) for u in self.uuids]
        return []

    def query_columns(self, expr: str, start: float, end: float, step: float) -> Columns:
        from flopwatch.telemetry.prom_client import Columns, Series

        m = re.search(r'UUID=~"([^"]*)"', expr)
        key = re.sub(r'UUID=~"[^"]*"', "UUID", expr)
        want = m.group(1).replace("\\\\-", "-").split("|") if m else []
        out = []
        for w in want:
            base, c = w.rsplit("-c", 1)
            for s in self.answers.get(key, {}).get(base, ()):
                ok = (s.t >= start - 1e-6) & (s.t <= end + 1e-6)
                lab = dict(s.labels) | {"UUID": w, "Hostname": f"{s.labels.get('Hostname')}-c{c}"}
                if lab.get("pod"):
                    lab["pod"] = f"{lab['pod']}-c{c}"
                out.append(Series(lab, s.t[ok], s.v[ok]))
        return Columns.of(out)


def run_replicate(args: argparse.Namespace) -> list[dict]:
    import resource

    from flopwatch.fleet.plan import ReadPlan
    from flopwatch.telemetry.prom_client import PrometheusClient
    from prom_helpers import LocalPrometheus

    t1 = WALL0 + args.hours * 3600
    plan = ReadPlan(WALL0, t1)
    with tempfile.TemporaryDirectory(prefix="fleet-node-") as d:  # the node's TSDB, removed afterwards
        build(Path(d), 8, args.hours)
        with LocalPrometheus(Path(d)) as p:
            client = PrometheusClient(p.url)
            uuids = client.label_values("UUID", "DCGM_FI_DEV_POWER_USAGE", WALL0, t1)
            version = client.version()
            from flopwatch.fleet.plan import chunking
            from flopwatch.fleet.reader import FleetReader, discover

            found = discover(client, plan)
            reader = FleetReader(client, plan, found, chunking(plan, 8))
            m = f'UUID=~"{"|".join(uuids)}"'
            answers: dict[str, dict[str, list]] = {}
            for (_key, _fn), expr in reader.queries(m).items():
                per: dict[str, list] = {}
                for s in client.query_range(expr, WALL0 + plan.window_s, t1, plan.window_s):
                    per.setdefault(s.labels["UUID"], []).append(s)
                answers[re.sub(r'UUID=~"[^"]*"', "UUID", expr)] = per
    rows = []
    for n in [int(x) for x in args.gpus.split(",")]:
        code = (
            "import json,pickle,resource,sys,time\n"
            "sys.path.insert(0, 'benchmarks')\n"
            "from bench_fleet import ReplayClient\n"
            "from flopwatch.fleet import ReadPlan, estimate_fleet\n"
            "a, u, n, t0, t1, v = pickle.load(sys.stdin.buffer)\n"
            "rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
            "w0, c0 = time.perf_counter(), time.process_time()\n"
            "r = estimate_fleet(ReplayClient(a, u, n // 8, v), ReadPlan(t0, t1), by='pod')\n"
            "print(json.dumps({'wall_s': time.perf_counter() - w0, 'cpu_s': time.process_time() - c0,\n"
            "  'gpu_hours': r.meta['gpu_hours'], 'groups': len(r.groups), 'queries': r.meta['queries'],\n"
            "  'maxrss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 'rss0_mb': rss0}))\n"
        )
        import pickle

        out = subprocess.run([sys.executable, "-c", code], input=pickle.dumps((answers, uuids, n, WALL0, t1, version)),
                             capture_output=True, check=True, env=_env())  # fmt: skip
        r = json.loads(out.stdout) | {"gpus": n, "hours": args.hours, "prom_cpu_s": None}
        rows.append(r)
        _print(r)
    _ = resource
    return rows


def _print(r: dict) -> None:
    gh = r["gpu_hours"]
    line = (
        f"{r['gpus']:>6} GPUs × {r['hours']:g} h: {gh:9.0f} GPU-h, wall {r['wall_s']:7.2f} s, flopwatch CPU "
        f"{r['cpu_s']:6.2f} s → {gh / r['cpu_s']:9.0f} GPU-h/CPU-s, peak RSS {r['maxrss_mb']:6.0f} MB"
    )
    if r.get("prom_cpu_s"):
        line += (
            f", Prometheus CPU {r['prom_cpu_s']:6.2f} s → {gh / r['prom_cpu_s']:7.0f} GPU-h/CPU-s; bare per-pod "
            f"query {r['bare_wall_s']:.2f} s wall, {r['bare_prom_cpu_s']:.2f} CPU-s"
        )
    print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    pp = sub.add_parser("prometheus")
    pp.add_argument("--gpus", type=int, default=1024)
    pp.add_argument("--hours", type=float, default=24.0)
    pp.add_argument("--tsdb", required=True, help="keep the backfilled TSDB here (reused when it matches)")
    pp.add_argument("--slices", default="128,512", help="smaller fleets read as host slices of the whole")
    pp.add_argument("--repeat", type=int, default=1)
    pp.add_argument("--compare", default="", help="NAME=SRC,…: variants run alternately (PYTHONPATH=SRC)")
    cp = sub.add_parser("recorded")
    cp.add_argument("--gpus", type=int, default=1024)
    cp.add_argument("--hours", type=float, default=24.0)
    cp.add_argument("--tsdb", required=True, help="keep the backfilled TSDB here (reused when it matches)")
    cp.add_argument("--repeat", type=int, default=5)
    cp.add_argument("--compare", default="", help="NAME=SRC,…: variants run alternately (PYTHONPATH=SRC)")
    cp.add_argument(
        "--instructions", action="store_true", help="also count instructions (valgrind callgrind)"
    )
    rp = sub.add_parser("replicate")
    rp.add_argument("--gpus", default="128,1024,10000")
    rp.add_argument("--hours", type=float, default=24.0)
    for p in (pp, cp, rp):
        p.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    rows = {"prometheus": run_prometheus, "recorded": run_recorded, "replicate": run_replicate}[args.mode](
        args
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
