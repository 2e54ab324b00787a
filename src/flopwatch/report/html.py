"""The self-contained ``report.html`` of a ``flopwatch run``: one file, inline CSS, figures as base64 PNGs.

It opens with the verdict (:mod:`flopwatch.report.headline`): what was measured, held-out accuracy beside the
no-model yardstick and the published models, the held-out verdicts (sound bounds) and apart from them the
calibrated estimate's own accuracy, what the result does and does not support. Then what ran (device, sweep, every workload and whether it passed the gate), every model's held-out
accuracy, the in-sample threshold table (labelled so), the figures, every join mismatch and the caveats. A run on the simulated accelerator carries a SIMULATED banner on top and says so
next to every number that matters.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import os
import re
import struct
from pathlib import Path
from typing import Any

from flopwatch.evaluate.headline import PUBLISHED, PUBLISHED_SOURCE
from flopwatch.io import atomic_write
from flopwatch.report.fmt import gain_pp, pct, share, sig3
from flopwatch.report.headline import study_models_mae_pct

_CSS = """
*{box-sizing:border-box}
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;color:#1b1b1b;background:#fafafa}
main{max-width:1100px;margin:0 auto;padding:1.2em 2em 3em}
p,li,code{overflow-wrap:anywhere}
h1{font-size:1.6em;margin:.4em 0}h2{font-size:1.25em;margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
h3{font-size:1.05em;margin:1.2em 0 .3em}
.banner{background:#b00020;color:#fff;padding:.7em 2em;font-weight:700;letter-spacing:.03em}
.banner small{font-weight:400;display:block;opacity:.9}
.verdict{background:#fff;border:2px solid #1f4e79;border-radius:8px;padding:.4em 1.2em 1em;margin:1em 0}
.verdict.simbox{border-color:#b00020}
.verdict .lead{font-size:1.05em}
ul.brief{font-size:1.05em;padding-left:1.2em}ul.brief li{margin:.25em 0}details summary{cursor:pointer;color:#1f4e79}
.cards{display:grid;grid-template-columns:repeat(3,minmax(0,1fr));gap:.8em;margin:1em 0}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.6em 1em;min-width:0}
.card .v{font-size:1.5em;font-weight:700}.card .k{font-size:.8em;color:#555}
.scroll{overflow-x:auto;max-width:100%;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;font-size:.85em;background:#fff;margin:.6em 0}
th,td{border:1px solid #ddd;padding:.25em .5em;text-align:right}th{background:#f0f0f0}
td.l,th.l{text-align:left}td:not(.l){white-space:nowrap}tr.out td{color:#888}tr.pub td{background:#f6f6ff}
.sim{color:#b00020;font-weight:700}.warn{color:#a15c00}.note{font-size:.85em;color:#444}
figure{margin:1em 0;background:#fff;border:1px solid #ddd;padding:.5em}figure img{max-width:100%;height:auto}
figcaption{font-size:.85em;color:#444}code{background:#eee;padding:0 .25em}
ul.caveats li{margin:.3em 0}
.verdict h2{margin-top:.4em}.hint{display:none}
@media (max-width:700px){main{padding:.8em .8em 2em}.banner{padding:.7em .8em}
.cards{grid-template-columns:repeat(2,minmax(0,1fr))}.card .v{font-size:1.2em}
.hint{display:block;font-size:.8em;color:#555;margin:.6em 0 -.3em}figure.wide img{max-width:none;width:720px}}
"""


def _component_words(summary: dict[str, Any]) -> str:
    """Which model 'default' resolved to, when it is not itself (no DRAM-traffic counter: default-p)."""
    comp = summary.get("component")
    if comp in (None, summary.get("default_model")):
        return ""
    return f" (here <code>{_e(comp)}</code>: the sensor reports no DRAM traffic)"


def _e(x: Any) -> str:
    return html.escape(str(x))


def _num(x: Any, signed: bool = False) -> str:
    """Three significant digits everywhere (report.fmt.sig3): no '5457' beside '1.06e+04', no '-0.0'."""
    return _e(sig3(x, signed=signed))


_CELL = re.compile(r"<t([hd])((?:\s[^>]*)?)>(.*?)</t[hd]>", re.S)
_NARROW_PX = 360  # a 390 px phone less the page's padding (.8em each side)


def _min_width_px(head: str, rows: list[str]) -> float:
    """The narrowest a table can be laid out, estimated from its cells: a cell that wraps (a header, a
    left-aligned text cell) needs its longest word, a number cell (``white-space:nowrap``) its whole text;
    ~7 px a character at the tables' .85em, 17 px of padding and border a column."""
    widths: list[float] = []
    for row in re.findall(r"<tr.*?</tr>", head + "".join(rows), re.S):
        for i, (kind, attrs, inner) in enumerate(_CELL.findall(row)):
            text = html.unescape(re.sub(r"<[^>]+>", "", inner))
            wraps = kind == "h" or "'l'" in attrs or '"l"' in attrs
            chars = max((len(w) for w in text.split()), default=0) if wraps else len(text)
            w = chars * 7.0 + 17.0
            if i < len(widths):
                widths[i] = max(widths[i], w)
            else:
                widths.append(w)
    return sum(widths)


def _table(head: str, rows: list[str]) -> str:
    """A table in its own horizontally scrolling box: a wide table never widens the page. On a narrow screen a
    hint above it says that it scrolls, only where it is wider than a phone (estimated from its columns)."""
    hint = (
        "<p class='hint'>The table scrolls sideways: swipe for more columns →</p>"
        if _min_width_px(head, rows) > _NARROW_PX
        else ""
    )
    return f"{hint}<div class='scroll'><table>{head}{''.join(rows)}</table></div>"


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{_e(path.stem)}" src="data:image/png;base64,{data}">'


def _figure(path: Path, href: str, caption: str) -> str:
    """A figure that opens full size when tapped (a link to the PNG beside the report, in figures/). A wide one
    keeps a readable width on a phone and scrolls sideways instead of shrinking."""
    w, h = struct.unpack(">II", path.read_bytes()[16:24])  # the PNG's IHDR: width, height in pixels
    wide = w > 1.6 * h
    img = f"<a href='{_e(href)}' title='open full size'>{_img(path)}</a>"
    if wide:
        img = f"<div class='scroll'>{img}</div>"
    cls = " class='wide'" if wide else ""
    return f"<figure{cls}>{img}<figcaption>{_e(caption)} Tap the figure to open it full size (figures/ beside this report).</figcaption></figure>"


_CAPTIONS = {
    "run_timeline": "Sensor power and utilisation over the whole run; shaded: workloads the detector found. The "
    "idle line is the baseline subtracted to get each workload's net energy E_net.",
    "run_energy_vs_flops": "Net energy against ground-truth FLOPs, every run (left), and energy per FLOP against MFU "
    "for the frontier runs on linear axes (right; MFU against hardware FLOPs). If energy were proportional to FLOPs "
    "the right panel would be flat; its spread is what the estimator must explain from telemetry.",
    "run_heldout_vs_truth": "Held-out estimates of the default model against ground truth, every split pooled; the "
    "grey band is ±10 %.",
    "fig4_per_workload": "Per workload: the held-out error of each model over the splits in which that workload was "
    "a test run (dot: median; bar: min–max). Red dashed lines: ±10 %.",
    "fig5_by_hyperparameter": "Held-out MAE grouped by model width, batch size, sequence length and depth: where an "
    "estimator is systematically worse.",
    "fig6_ablation": "Left: distribution of held-out signed errors, all splits. Right: per-split MAE of each model on "
    "the same splits: the study's eq. 1 vs eq. 2 ablation plus flopwatch's models where both equations could be "
    "evaluated; a model this data cannot support is listed under 'Not evaluated' and absent here.",
    "coverage": "Calibration of the prediction intervals: share of held-out truths inside the interval against the "
    "nominal confidence (on the dashed line = honest intervals).",
    "threshold_rates": "The calibrated estimate's accuracy, not a verdict (the verdicts are the sound table "
    "above). Threshold analysis over a grid of thresholds T, held-out runs: wrongly accused (solid: "
    "declared above, truly below) and wrong below (dashed: declared below, truly above). Left, the interval "
    "decision, whose third outcome, uncertain (dotted), is plotted on its own and counted as neither error; "
    "right, a decision on the point estimate (no uncertain outcome). Each rate is a share of its class (runs "
    "truly below T for wrongly accused, truly above T for wrong below): near the ends of the grid a class holds "
    "few runs, so a spike there can be one or two runs whose calibrated interval missed; the sound verdicts "
    "above never accuse on this interval.",
}


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line:
            out.append(json.loads(line))
    return out


def _verdict(summary: dict[str, Any], tag: str) -> list[str]:
    """The box a verifier reads first (report.headline): what was measured, held-out accuracy beside the
    yardstick and the published models, the held-out verdicts and the calibrated interval's accuracy (two tables),
    and what the result supports."""
    h = summary.get("headline")
    if not h:
        return []
    sim = h["what_was_measured"]["kind"] == "simulated"
    ho, ys, g = h["heldout"], h["yardstick"], h["gain_over_yardstick_pp"]
    cal = h["calibrated_interval"]
    p = [f"<section class='verdict{' simbox' if sim else ''}'><h2>Verdict{tag}</h2>"]
    p.append(f"<p class='{'sim' if sim else ''}'>{_e(h['what_was_measured']['text'])}</p>")
    brief = h.get("brief")
    if brief:  # the three lines first (as the terminal prints them); the whole paragraph below
        items = "".join(f"<li><b>{_e(k)}</b>: {_e(v)}</li>" for k, v in brief.items())
        p.append(f"<ul class='brief'>{items}</ul>")
        p.append(f"<details><summary>The verdict in full</summary><p>{_e(h['verdict'])}</p></details>")
    else:
        p.append(f"<p class='lead'>{_e(h['verdict'])}</p>")
    cards = [
        (f"held-out MAE, {ho['model']}", pct(ho["mae_pct"])),
        ("no-model yardstick (median J/FLOP)", pct(ys["mae_pct"])),
        ("gain over the yardstick", f"{gain_pp(g)[0]} pp"),  # rounded to what the spread supports
        ("splits with a run &gt; 10 % off", share(ho["frac_splits_any_over_10pct"])),
        ("frontier runs (calibration and test)", str(ho["n_frontier"])),
        (
            f"held-out coverage of the calibrated {share(cal['confidence'])} intervals",
            share((summary.get("heldout") or {}).get("coverage")),
        ),
    ]
    p.append("<div class='cards'>")
    for k, v in cards:
        p.append(f"<div class='card'><div class='v'>{_e(v)}</div><div class='k'>{k}{tag}</div></div>")
    p.append("</div>")
    data = h["what_was_measured"]["kind"]
    rows = [
        f"<tr style='font-weight:700'><td class='l'>flopwatch <code>{_e(ho['model'])}</code>"
        f"{' (' + _e(ho['component']) + ')' if ho.get('component') not in (None, ho['model']) else ''}</td>"
        f"<td>{_e(pct(ho['mae_pct']))}</td><td>{_e(share(ho['frac_splits_any_over_10pct']))}</td>"
        f"<td class='l'>measured here, {data} data</td></tr>",
        f"<tr><td class='l'>no model: median J/FLOP of the calibration runs</td><td>{_e(pct(ys['mae_pct']))}</td>"
        f"<td>{_e(share(ys['frac_splits_any_over_10pct']))}</td><td class='l'>measured here, {data} data</td></tr>",
    ]
    for name, m in (h.get("study_models_here") or {}).items():
        rows.append(
            f"<tr><td class='l'>the study's {_e(name)}, refitted here</td><td>{_e(pct(m['mae_pct']))}</td>"
            f"<td>{_e(share(m['frac_splits_any_over_10pct']))}</td><td class='l'>measured here, {data} data</td></tr>"
        )
    for name in ("eq1", "eq2"):
        m = h["published"][name]
        rows.append(
            f"<tr class='pub'><td class='l'>{_e(name)} as published</td><td>{_e(pct(m['mae_pct']))}</td>"
            f"<td>{_e(share(m['frac_splits_any_over_10pct']))}</td><td class='l'>published: real Jetson Orin Nano, "
            "21 fp32 runs</td></tr>"
        )
    p.append(
        f"<h3>Held-out accuracy ({ho['n_splits']} splits, {ho['n_train']} calibration / {ho['n_test']} test runs)</h3>"
    )
    p.append(
        _table(
            "<tr><th class='l'>estimator</th><th>MAE</th><th>splits with a run &gt; 10 % off</th>"
            "<th class='l'>source</th></tr>",
            rows,
        )
    )
    p.append(
        f"<p class='note'>Gain over the yardstick, paired per split: {_e(gain_pp(g)[0])} pp "
        f"(95 % of splits between {_e(gain_pp(g)[1])} and {_e(gain_pp(g)[2])} pp; "
        f"better on {_e(share(g['frac_splits_better']))} of splits). Published: {_e(PUBLISHED_SOURCE)}; those "
        "numbers come from other hardware and are context, not a comparison on the same data.</p>"
    )
    p += _threshold_tables(h)
    p.append(f"<p><b>What this supports:</b> {_e(h['supports'])}</p>")
    p.append(f"<p><b>What it does not support:</b> {_e(h['does_not_support'])}</p>")
    p.append("</section>")
    return p


def _threshold_rows(t: dict[str, Any]) -> list[str]:
    """The rows of one threshold table: the errors first, beside the threshold (on a phone they are the columns
    on screen)."""

    def cells(r: dict[str, Any]) -> str:
        return (
            f"<td>{r['wrong_below']}</td><td>{r['wrong_accuse']}</td><td>{r['uncertain']}</td>"
            f"<td>{r['correct']}</td><td>{r['n_truth_above']} / {r['n_truth_below']}</td></tr>"
        )

    rows = [
        f"<tr><td class='l'>{_e(sig3(r['threshold_flops']))} FLOP ({100 * r['quantile']:g}th percentile "
        "of the sweep)</td>" + cells(r)
        for r in t["at_sweep_quantiles"]
    ]
    rows += [
        f"<tr><td class='l'>each run {r['margin_pct']:g} % {r['run_is']} its threshold</td>" + cells(r)
        for r in t["by_margin"]
    ]
    return rows


_THRESHOLD_HEAD = (
    "<tr><th class='l'>threshold T</th><th>wrong below</th><th>wrongly accused</th><th>uncertain</th>"
    "<th>correct</th><th>truly above / below</th></tr>"
)


def _threshold_tables(h: dict[str, Any]) -> list[str]:
    """The two answers on held-out runs, each in its own table: the verdict (``estimate.verdict.assess``, sound
    bounds) with its decisiveness, then the calibrated interval's own accuracy (not a verdict)."""
    p: list[str] = []
    v, cal = h.get("verdicts"), h["calibrated_interval"]
    if v is not None:
        d = v["decisiveness"]
        p.append(
            f"<h3>Verdicts on held-out runs (sound bounds, as <code>flopwatch estimate</code> judges; "
            f"{v['n_splits']} splits × {v['n_test']} test runs)</h3>"
        )
        p.append(_table(_THRESHOLD_HEAD, _threshold_rows(v)))
        frows = [
            f"<tr><td class='l'>T = {r['factor']:g} × truth</td><td>{_e(share(r['below_rate']))}</td>"
            f"<td>{_e(share(r['above_rate']))}</td><td>{_e(share(r['uncertain_rate']))}</td></tr>"
            for r in d["by_truth_factor"]
        ]
        p.append(
            _table(
                "<tr><th class='l'>decisiveness</th><th>below</th><th>above</th><th>uncertain</th></tr>",
                frows,
            )
        )
        rng = d.get("decisive_at_truth_range")
        blocked = v.get("warnings") or {}
        p.append(
            "<p class='note'>The verifier's view of an unseen run: each split's test runs judged by "
            "<code>flopwatch.estimate.verdict.assess</code> with a profile calibrated on that split's training "
            "runs only, on the run's device"
            + (
                ", over the trace's windows (power, SM clock and power limit as recorded, pipe counters where the "
                "trace has them)"
                if v.get("trace_windows")
                else ", on the record's totals"
            )
            + ". 'below' needs the sound upper bound (physics, the datasheet, the observed counters — never the "
            "calibration) under T and no violated assumption; 'above' needs the accusation's lower bound, valid "
            "for the least efficient format and clock the counters allow and a later session, over T. Median "
            f"<code>decisive_at</code> (T ÷ estimate): {_e(sig3(d['median_decisive_at']))}; the same as T ÷ "
            f"truth: {_e(sig3(d['median_decisive_at_truth']))}"
            + (f" (range {_e(sig3(rng[0]))}–{_e(sig3(rng[1]))})" if rng else "")
            + f"; accusation lower bound ÷ truth: median {_e(sig3(d['median_above_at_truth']))}; cases a "
            f"warning kept from 'below': {_e(share(d['blocked_rate']))}"
            + (
                " (" + "; ".join(f"{_e(w)}: {n}" for w, n in list(blocked.items())[:3]) + ")"
                if blocked
                else ""
            )
            + ". Counts are run × split cases."
            + (
                f" Left out: {len(v['failed_splits'])} split(s) whose calibration failed "
                f"({_e(v['failed_splits'][0])}{'; …' if len(v['failed_splits']) > 1 else ''})."
                if v.get("failed_splits")
                else ""
            )
            + "</p>"
        )
    p.append(
        f"<h3>Calibrated estimate on held-out runs ({_e(share(cal['confidence']))} intervals; its accuracy, "
        "not a verdict)</h3>"
    )
    p.append(_table(_THRESHOLD_HEAD, _threshold_rows(cal)))
    p.append(
        "<p class='note'>Every held-out test run of every split, judged by a profile calibrated without it: "
        "the calibrated interval taken as a decision — 'above' iff its lower end exceeds T, 'below' iff its upper "
        f"end is under T, else 'uncertain'. Its held-out coverage: {_e(share(cal['coverage']))}. These rows "
        "measure the estimator under its assumptions (the workload resembles the calibration runs, one session); "
        "no verifier's 'below' rests on them.</p>"
    )
    return p


def render_report(outdir: str | os.PathLike[str], summary: dict[str, Any]) -> str:
    """The report's HTML text (reads records.jsonl, evaluation.json and the figures from ``outdir``)."""
    out = Path(outdir)
    sim = bool(summary.get("simulated"))
    records = _read_jsonl(out / "records.jsonl")
    ev: dict[str, Any] = {}
    if (out / "evaluation.json").exists():
        ev = json.loads((out / "evaluation.json").read_text(encoding="utf-8"))
    tag = ' <span class="sim">(simulated)</span>' if sim else ""
    p: list[str] = []
    p.append("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>")
    p.append("<meta name='viewport' content='width=device-width, initial-scale=1'>")
    p.append(f"<title>flopwatch run — {_e(summary.get('device'))}{' (SIMULATED)' if sim else ''}</title>")
    p.append(f"<style>{_CSS}</style></head><body>")
    if sim:
        sm = summary.get("simulation", {})
        p.append(
            "<div class='banner'>SIMULATED RUN — no hardware was measured"
            f"<small>Every power, energy and utilisation value below comes from flopwatch's simulated "
            f"{_e(str(summary.get('device_name', summary.get('device'))).removesuffix(' (simulated)'))} "
            f"(power model: {_e(sm.get('power_model', '?'))}; "
            f"{_e(sm.get('power_model_source', ''))}). It shows how the pipeline behaves, "
            "not how accurate the estimator is on real hardware.</small></div>"
        )
    p.append("<main>")
    started = summary.get("started_wall")
    when = (
        _dt.datetime.fromtimestamp(started, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        if started
        else ""
    )
    p.append(f"<h1>flopwatch run on {_e(summary.get('device'))}{tag}</h1>")
    if summary.get("error"):
        p.append(
            f"<p class='warn'><b>The analysis failed:</b> {_e(summary['error'])}. The trace and the records that "
            "were collected are in this directory.</p>"
        )
    p.append(
        f"<p>{_e(summary.get('device_name', ''))} — {_e(summary.get('device_reason', ''))}. {_e(when)}; "
        f"flopwatch {_e(summary.get('flopwatch_version', ''))}; seed {_e(summary.get('seed'))}; "
        f"wall time {_num(summary.get('wall_time_s'))} s.</p>"
    )
    p += _verdict(summary, tag)
    dm = summary.get("default_model")

    # What ran
    p.append("<h2>What ran</h2>")
    p.append(
        f"<p>Sweep <code>{_e(summary.get('sweep'))}</code>: {_e(summary.get('sweep_note', ''))}. "
        f"Idle baseline {_num(summary.get('idle_baseline_s'))} s "
        f"(idle power {_num(summary.get('idle_power_w'))} W, {_e(summary.get('idle_source', ''))}); "
        f"telemetry at {_num(summary.get('rate_hz'))} Hz, {_e(summary.get('trace_rows'))} trace rows; "
        f"{_e(summary.get('n_detected'))} workloads detected (poll 1.5 s, util > 5 %, 2 polls to start, 3 to end). "
        f"Calibration precision: {_e(summary.get('calibration_dtype'))}.</p>"
    )
    p.append(
        "<p class='note'>Columns: <b>duration</b>, <b>mean util</b> and <b>E_net</b> (energy above the idle baseline) "
        "come from the detected telemetry segment, as the estimator sees them; <b>steps</b>, <b>ground truth FLOPs</b> "
        "(FlopCounterMode count × timed steps: hardware FLOPs, fused attention counted 3.5× forward) and <b>MFU</b> "
        "(achieved hardware FLOP/s over the device's dense peak for the precision; fp32 against the vector peak, or "
        "the matrix peak where fp32 GEMMs run on matrix units) come from the training loop. <b>J/TFLOP</b> = "
        "E_net / FLOPs. Grey rows did not pass the frontier gate and are neither calibrated nor evaluated.</p>"
    )
    for n in summary.get("plan_notes") or []:
        p.append(f"<p class='warn'>{_e(n)}</p>")
    gate = summary.get("gate") or {}
    kept = set(gate.get("kept_labels") or [])
    reasons = {x["label"]: x["reason"] for x in gate.get("excluded") or []}
    rows = []
    for r in records:
        k = r.get("label") in kept
        e, f = r.get("net_energy_j"), r.get("total_flops")
        jpt = (float(e) / float(f) * 1e12) if (e is not None and f) else None
        util = r.get("mean_util")
        why = "frontier" if k else reasons.get(r.get("label"), "not measured")
        rows.append(
            f"<tr class='{'' if k else 'out'}'><td class='l'>{_e(r.get('label'))}</td><td>{_e(r.get('dtype'))}</td>"
            f"<td>{_e(r.get('steps'))}</td><td>{_num(r.get('duration_s'))}</td>"
            f"<td>{_e(share(util))}</td>"
            f"<td>{_e(share(r.get('mfu')))}</td>"
            f"<td>{_num(e)}</td><td>{_num(f)}</td><td>{_num(jpt)}</td>"
            f"<td class='l'>{_e(why)}</td><td class='l'>{_e((r.get('join') or {}).get('status', '–'))}</td></tr>"
        )
    mfu_conv = {str(r.get("mfu_convention") or "hardware") for r in records}
    p.append(
        _table(
            "<tr><th class='l'>workload</th><th>dtype</th><th>steps</th><th>duration (s)</th><th>mean util</th>"
            f"<th>MFU ({_e('/'.join(sorted(mfu_conv)))} FLOPs)</th><th>E_net (J)</th><th>ground truth (FLOP)</th>"
            "<th>J/TFLOP</th><th class='l'>gate</th><th class='l'>join</th></tr>",
            rows,
        )
    )

    # Accuracy
    p.append(f"<h2>Estimator accuracy on held-out runs{tag}</h2>")
    p.append(
        f"<p>{_e(summary.get('n_splits'))} random splits of the {_e(summary.get('n_frontier'))} frontier runs into "
        f"{_e(summary.get('n_train'))} calibration and {_e(summary.get('n_test'))} test runs (the study: 200 splits, "
        f"14/7). Errors are (estimate − truth)/truth on the test runs. The profile in "
        f"<code>profile.json</code> (sha256 {_e(str(summary.get('profile_sha256'))[:16])}…) is flopwatch's "
        f"default model{_component_words(summary)}, calibrated on all the frontier runs.</p>"
    )
    models = ev.get("models", {})
    if models:
        rows = []
        for name, m in models.items():
            bold = " style='font-weight:700'" if name == dm else ""
            rows.append(
                f"<tr{bold}><td class='l'>{_e(name)}</td><td>{_num(m.get('mae_pct'))}</td>"
                f"<td>{_num(m.get('sd_pct'))}</td><td>{_num(m.get('mean_signed_pct'), signed=True)}</td>"
                f"<td>{_num(m.get('p90_abs_pct'))}</td><td>{_num(m.get('worst_pct'))}</td>"
                f"<td>{_e(share(m.get('frac_splits_any_over_10pct')))}</td>"
                f"<td>{_e(share(m.get('coverage')))}</td>"
                f"<td>{_num(m.get('median_interval_halfwidth_pct'))}</td>"
                f"<td class='l'>{_e(m.get('description', ''))}</td></tr>"
            )
        p.append(
            _table(
                "<tr><th class='l'>model</th><th>MAE (%)</th><th>SD (%)</th><th>mean signed (%)</th>"
                "<th>p90 |err| (%)</th><th>worst (%)</th><th>splits any &gt; 10 %</th><th>interval coverage</th>"
                "<th>median ± (%)</th><th class='l'>description</th></tr>",
                rows,
            )
        )
    base = summary.get("constant_jpf_baseline") or {}
    if base:
        p.append(
            "<p>Yardstick: on the same splits, predicting every test run from its net energy and the calibration "
            f"runs' median J/FLOP alone (no model) gives MAE {_e(pct(base.get('mae_pct')))} "
            f"({_e(share(base.get('frac_splits_any_over_10pct')))} of splits with a run &gt; 10 % off); "
            f"J/FLOP varies by {_e(pct(base.get('jpf_cv_pct')))} (CV) across the frontier runs{tag}. An estimator "
            "adds information only by the margin it beats this.</p>"
        )
    skipped = summary.get("skipped_models") or ev.get("skipped_models") or {}
    if skipped:
        p.append(
            "<p class='warn'>Not evaluated: "
            + "; ".join(f"<code>{_e(m)}</code> ({_e(why)})" for m, why in skipped.items())
            + ". eq. 1 and the bandwidth models need DRAM traffic per run, which this sensor does not report "
            "(NVML has no DRAM byte counter before Hopper's GPM; Jetson's EMC monitor has one).</p>"
        )
    here = study_models_mae_pct(summary)
    p.append(
        "<p>For reference, the Jetson Orin Nano study (Fowler 2026) <b>published</b> held-out MAE "
        f"{_e(pct(PUBLISHED['eq1']['mae_pct']))} for eq. 1 ({_e(share(PUBLISHED['eq1']['frac_splits_any_over_10pct']))} "
        f"of splits with a workload &gt; 10 % off) and {_e(pct(PUBLISHED['eq2']['mae_pct']))} for eq. 2 "
        f"({_e(share(PUBLISHED['eq2']['frac_splits_any_over_10pct']))}) on 21 real fp32 runs"
        + (
            "; <b>measured here</b> on this run's "
            + ("simulated " if sim else "")
            + "data: "
            + ", ".join(f"{_e(k)} {_e(pct(v))}" for k, v in here.items())
            if here
            else ""
        )
        + ".</p>"
    )
    drift = (summary.get("headline") or {}).get("idle_drift") or {}
    if drift.get("mae_pct"):
        p.append(
            "<p>Idle drift: calibrated on this session and re-scored as if the idle baseline were off by "
            + ", ".join(f"{_e(k)} W → MAE {_e(pct(v))}" for k, v in drift["mae_pct"].items())
            + f" ({_e(drift.get('basis', ''))}).</p>"
        )

    # In-sample threshold table
    th = summary.get("threshold") or {}
    vs = th.get("verdicts") or []
    if vs:
        n_ok = sum(1 for v in vs if v.get("correct") is True)
        n_wrong = sum(1 for v in vs if v.get("correct") is False)
        n_unc = sum(1 for v in vs if v.get("verdict") == "uncertain")
        p.append(f"<h2>The calibrated profile on its own runs (in-sample){tag}</h2>")
        p.append(
            f"<p>Threshold T = {_num(th.get('threshold_flops'))} FLOP (the geometric middle of the sweep). The "
            f"profile in <code>profile.json</code> was calibrated on these very runs, so this table is "
            f"<b>in-sample</b> and flatters the estimate (not the verdict, whose upper bound never reads the "
            f"calibration): {n_ok} correct, {n_unc} uncertain, {n_wrong} wrong verdicts. Two answers: the "
            "estimate with its calibrated interval, and the verdict from its own bounds (sound upper; the "
            "accusation's lower). The held-out verdicts are in the Verdict box above; the calibrated estimate's "
            "error rates over a grid of thresholds are in the figures and in <code>evaluation.json</code>.</p>"
        )
        rows = [
            f"<tr><td class='l'>{_e(v['label'])}</td><td>{_num(v['total_flops'])}</td>"
            f"<td>{_num(v['estimate_flops'])}</td>"
            f"<td>{_num(v['calibrated_lower_flops'])} – {_num(v['calibrated_upper_flops'])}</td>"
            f"<td>{_num(v['err_pct'], signed=True)}</td>"
            f"<td>{_num(v['verdict_lower_flops'])} – {_num(v['verdict_upper_flops'])}</td>"
            f"<td class='l'>{_e(v['verdict'])}</td>"
            f"<td class='l'>{_e(v['truth'])}</td></tr>"
            for v in vs
        ]
        p.append(
            _table(
                "<tr><th class='l'>workload</th><th>truth (FLOP)</th><th>estimate (FLOP)</th>"
                "<th>calibrated interval (FLOP)</th><th>error (%)</th><th>verdict bounds (FLOP)</th>"
                "<th class='l'>verdict</th><th class='l'>truth vs T</th></tr>",
                rows,
            )
        )

    # Figures
    figs = [out / f for f in summary.get("figures") or []]
    if figs:
        p.append(f"<h2>Figures{tag}</h2>")
        for f in figs:
            if f.exists():
                cap = _CAPTIONS.get(f.stem, f.stem.replace("_", " "))
                p.append(_figure(f, f.relative_to(out).as_posix(), cap))

    for fe in summary.get("figure_errors") or []:
        p.append(f"<p class='warn'>A figure could not be drawn: {_e(fe)}</p>")

    # Mismatches
    mm = summary.get("join_mismatches") or []
    p.append("<h2>Detection ↔ record join</h2>")
    if mm:
        rows = [
            f"<tr><td class='l'>{_e(m.get('label') or '–')}</td><td class='l'>{_e(m.get('kind'))}</td>"
            f"<td class='l'>{_e(m.get('detail'))}</td></tr>"
            for m in mm
        ]
        p.append(
            _table(
                "<tr><th class='l'>workload</th><th class='l'>problem</th><th class='l'>detail</th></tr>",
                rows,
            )
        )
    else:
        p.append(
            "<p>Every workload was detected as exactly one segment, and every segment matched one workload.</p>"
        )

    # Caveats
    p.append("<h2>Caveats</h2><ul class='caveats'>")
    if sim:
        p.append(
            "<li><span class='sim'>This run is simulated.</span> The simulator's power model is grounded in the MASCOTS 2026 "
            "measurements where the GPU is in them (A100, L40, L4) and in documented spec-based assumptions "
            "elsewhere; its sensor reproduces NVML's averaging window, update period, partial sampling, noise and "
            "counter resolution. Accuracy numbers here describe the pipeline on the twin, not on hardware.</li>"
            "<li><span class='sim'>What the twin can and cannot show:</span> within one batch regime its power is a straight line "
            "in MFU plus per-architecture and run-to-run offsets of the size the MASCOTS data shows, so net energy is "
            "close to <i>a·duration + b·FLOPs</i> (eq. 2's form) times a few percent of noise. The held-out error "
            "above therefore measures how the pipeline copes with that noise, detection latency and sensor "
            "artefacts; it cannot reveal model-form errors that real hardware has and the twin lacks (kernel mix, "
            "thermals, clock boost). See <code>docs/simulator.md</code>.</li>"
        )
    else:
        p.append(
            "<li>Each run's energy includes its 3 untimed warm-up steps (the detector sees them), its FLOPs do not, "
            "as in the study.</li>"
        )
    p.append(
        "<li>One measurement session: the calibration is specific to this device, driver, power limit and idle "
        "baseline. Carrying it to another session adds the idle-drift error shown above and in "
        "<code>evaluation.json</code> (<code>idle_shift_mae_pct</code>).</li>"
        "<li>Only frontier runs (mean utilisation ≥ 80 %, one precision) are calibrated and evaluated; host-bound "
        "runs draw power that does not track their FLOPs.</li>"
        "<li>Ground truth is PyTorch's <code>FlopCounterMode</code> count of one forward+backward step × steps "
        "(hardware FLOPs: fused attention counted as 3.5× forward, its backward recompute included; no causal "
        "discount), optimizer FLOPs excluded, as in the study. PaLM-style model FLOPs (no recompute, causal "
        "attention halved) are lower; MFU here is against hardware FLOPs.</li>"
        "<li>Intervals are conformal-style from leave-one-out residuals of the calibration runs; with few runs "
        "their nominal coverage is approximate.</li>"
        "</ul>"
    )
    p.append(
        "<h2>Reproduce</h2><p><code>flopwatch run --device "
        f"{_e(summary.get('device'))} --sweep {_e(summary.get('sweep'))} --seed {_e(summary.get('seed'))}"
        f"{' --quick' if summary.get('quick') else ''}"
        f"{(' --budget-s ' + _e(sig3(summary.get('budget_s')))) if summary.get('budget_s') else ''} -o DIR</code></p>"
    )
    p.append("</main></body></html>")
    return "\n".join(p)


def write_report(outdir: str | os.PathLike[str], summary: dict[str, Any]) -> Path:
    """Write ``report.html`` into ``outdir`` (atomically) and return its path."""
    out = Path(outdir)
    text = render_report(out, summary)
    return atomic_write(out / "report.html", text)
