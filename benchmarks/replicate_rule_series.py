"""Make a larger fleet of flopwatch rule series from a smaller one: N relabelled copies (benchmark input only).

Building 1024 simulated GPUs × 24 h of raw samples takes about an hour of promtool on this machine; the rule
series of that fleet are 240 times smaller. This script takes the rule series that ``promtool tsdb
create-blocks-from rules`` computed over a real (raw) fleet in ``SRC`` (``bench_fleet.py --rules`` makes them),
and writes copies 1…N−1 of every series with ``UUID``, ``Hostname``, ``instance`` and ``pod`` suffixed ``-cK``
as OpenMetrics, backfilled into ``DST``. Copy 0 is the promtool output itself; the copies carry the same values,
so the resulting fleet is N times the source fleet's work, and every rule sample in it is one promtool computed.
``SRC``'s blocks (raw and rules) should be copied into ``DST`` first so the reader finds the raw metric names.

    python benchmarks/replicate_rule_series.py SRC DST --copies 8
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from collections import defaultdict
from pathlib import Path

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
RELABEL = ("UUID", "Hostname", "instance", "pod")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--copies", type=int, default=8)
    args = ap.parse_args()
    from flopwatch.fleet.localprom import backfill, find_tool

    dump = subprocess.run(
        [str(find_tool("promtool")), "tsdb", "dump", '--match={__name__=~"flopwatch:.*"}', args.src],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    fams: dict[str, list[tuple[dict[str, str], str, str]]] = defaultdict(list)
    for line in dump.splitlines():
        if not line.startswith("{"):
            continue
        lab_s, rest = line[1:].rsplit("} ", 1)
        value, ts = rest.split()
        labels = dict(LABEL.findall(lab_s))
        fams[labels.pop("__name__")].append((labels, value, ts))
    with tempfile.TemporaryDirectory() as d:
        om = Path(d) / "copies.om"
        n = 0
        with open(om, "w") as f:
            for name, rows in fams.items():
                f.write(f"# TYPE {name} gauge\n")
                for k in range(1, args.copies):
                    for labels, value, ts in rows:
                        lab = {key: (f"{v}-c{k}" if key in RELABEL else v) for key, v in labels.items()}
                        body = ",".join(f'{key}="{v}"' for key, v in sorted(lab.items()))
                        f.write(f"{name}{{{body}}} {value} {int(ts) / 1000:.3f}\n")
                        n += 1
            f.write("# EOF\n")
        backfill(om, args.dst, timeout_s=3600)
    print(
        f"# {sum(len(r) for r in fams.values())} rule samples read, {n} written in {args.copies - 1} copies"
    )


if __name__ == "__main__":
    main()
