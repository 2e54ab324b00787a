"""The verdict a verifier reads first, in words: what was measured, how accurate the estimate is on held-out runs
beside the no-model yardstick and the published models, the two answers on held-out runs kept apart (the verdict from
sound bounds, as ``flopwatch estimate`` gives it, and the calibrated interval's own accuracy), and what the result
does and does not support.

The numbers are :func:`flopwatch.evaluate.headline.headline_numbers`'s (every number held-out: a run is judged only
by a profile calibrated without it); :func:`build_headline` words them, :func:`apply_headline` puts the headline
into a run's ``summary.json`` (schema ``flopwatch.run/2``, :data:`flopwatch.pipeline.summary.SUMMARY_SCHEMA`) and
the report renders it first.

Summary schema ``flopwatch.run/2`` (from ``flopwatch.run/1``): ``published_models_mae_pct`` held eq. 1/eq. 2 as
*measured here* (on simulated data for a simulated run), not published values; it is split into
``study_models_heldout_mae_pct`` (the study's equations refitted and evaluated here) and
``published_heldout_mae_pct`` (the values Fowler 2026 published, real hardware). Readers of ``run/1`` files use
:func:`study_models_mae_pct`, which reads both.
"""

from __future__ import annotations

from typing import Any

from flopwatch.evaluate.headline import PUBLISHED, PUBLISHED_SOURCE, headline_numbers, margin_row
from flopwatch.report.fmt import gain_pp, pct, ratio, share, sig3

#: headline/2: ``thresholds`` (the calibrated interval as a decision) split into ``verdicts`` (the verifier's,
#: from ``estimate.verdict.assess``) and ``calibrated_interval`` (the estimate's accuracy); ``wrong_clear`` is
#: ``wrong_below``
HEADLINE_SCHEMA = "flopwatch.headline/2"


def _gain_words(g: dict[str, float]) -> str:
    mean, lo, hi = gain_pp(g)  # rounded to what the spread over splits supports
    rng = f"95 % of splits between {lo} and {hi} pp"
    if g["p025"] > 0:
        return f"beats the yardstick by {mean} pp ({rng})"
    if g["p975"] < 0:
        return f"is worse than the yardstick by {mean.lstrip('-')} pp ({rng})"
    return f"differs from the yardstick by {mean} pp ({rng}): not distinguishable from energy alone"


def _factor_row(d: dict[str, Any], f: float) -> dict[str, Any] | None:
    return next((r for r in d["by_truth_factor"] if r["factor"] == f), None)


def _verdict_words(num: dict[str, Any], conf: float) -> str:
    """The two answers in words, each named: the verdict (sound bounds, as ``flopwatch estimate`` judges) and the
    calibrated estimate's interval (its accuracy, never a verdict)."""
    cal25 = margin_row(num, 25.0, table="calibrated_interval")
    ci = num["calibrated_interval"]
    wbc = sum(r["wrong_below"] for r in ci["by_margin"] + ci["at_sweep_quantiles"])
    cal = (
        f"Calibrated estimate (not a verdict): its {share(conf)} interval held the truth of "
        f"{share(num['calibrated_interval']['coverage'])} of held-out runs; taken as a decision it would call a run "
        f"25 % above a threshold above in {share(cal25['correct_rate'])} of cases and wrongly below in "
        f"{share(cal25['wrong_below'] / cal25['n'])} ({wbc} wrong below over its whole table), but it rests on the "
        "workload resembling the calibration, so it never makes a verifier's 'below'."
    )
    v = num.get("verdicts")
    if v is None:
        return "Verdict: not computed for this run. " + cal
    at25a = margin_row(num, 25.0)
    at50b = margin_row(num, 50.0, "below")
    d = v["decisiveness"]
    x2 = _factor_row(d, 2.0)
    dec = d["median_decisive_at_truth"]
    acc = d["median_above_at_truth"]
    rows = v["by_margin"] + v["at_sweep_quantiles"]
    wb = sum(r["wrong_below"] for r in rows)
    return (
        f"Verdict (sound bounds: physics, the datasheet and what the trace observed — what `flopwatch estimate` "
        f"says), {v['n']} held-out cases at {len(rows)} thresholds each: {wb} wrong below; a run 25 % "
        f"above a threshold is declared above in {share(at25a['correct_rate'])} (an accusation's lower bound must "
        f"hold for any format and clock: median {ratio(acc)} × the true FLOPs) and a run 50 % below it is declared "
        f"below in {share(at50b['correct_rate'])}, since 'below' needs the sound upper bound under T: "
        + (
            f"median {ratio(dec)} × the true FLOPs (at T = 2 × truth, {share(x2['below_rate'])} are below). "
            if dec is not None and x2 is not None
            else "no held-out run could be below at any threshold (a warning blocked each). "
        )
        + cal
    )


def _certified_words(num: dict[str, Any]) -> str:
    """What the verdicts certify, from the held-out decisiveness: the factors of a run's FLOPs beyond which a
    threshold gets "above" and "below"."""
    v = num.get("verdicts")
    if v is None:
        return ""
    d = v["decisiveness"]
    acc, dec = d["median_above_at_truth"], d["median_decisive_at_truth"]
    above = (
        f"'above' only for thresholds under about {ratio(acc)} × a run's FLOPs (median)"
        if acc
        else "no 'above' at any threshold"
    )
    below = (
        f"'below' only for thresholds over about {ratio(dec)} × its FLOPs"
        if dec is not None
        else "no 'below' at any threshold (a warning blocked each)"
    )
    return f" Verdicts (sound, held-out): {above}; {below}."


def _brief(
    num: dict[str, Any], mae: float, ymae: float, gain: dict[str, float], conf: float
) -> dict[str, str]:
    """The verdict paragraph in three short lines (the terminal's summary): accuracy, verdicts, interval."""
    if gain["p025"] > 0:
        g = f"better by {gain_pp(gain)[0]} pp"
    elif gain["p975"] < 0:
        g = f"worse by {gain_pp(gain)[0].lstrip('-')} pp"
    else:
        g = "not distinguishable from energy alone"
    out = {
        "accuracy": f"unseen runs within {pct(mae)} of their true FLOPs on average; the no-model yardstick "
        f"(median J/FLOP) {pct(ymae)}: {g}",
        "interval": f"the calibrated {share(conf)} interval held {share(num['calibrated_interval']['coverage'])} "
        "of held-out truths (the estimate's accuracy; never a verdict's 'below')",
    }
    v = num.get("verdicts")
    if v is None:
        out["verdicts"] = "not computed for this run"
    else:
        rows = v["by_margin"] + v["at_sweep_quantiles"]
        wb = sum(r["wrong_below"] for r in rows)
        d = v["decisiveness"]
        dec, acc = d["median_decisive_at_truth"], d["median_above_at_truth"]
        below = (
            f"'below' only when T ≥ {ratio(dec)} × a run's FLOPs"
            if dec is not None
            else "no 'below' at any T"
        )
        above = f"'above' only when T ≤ {ratio(acc)} × them" if acc else "no 'above' at any T"
        out["verdicts"] = f"{wb} wrong below in {v['n']} held-out cases; {below}, {above} (medians)"
    return {k: out[k] for k in ("accuracy", "verdicts", "interval")}


def build_headline(summary: dict[str, Any], ev: Any, sound: Any = None) -> dict[str, Any]:
    """The headline of a run: ``summary`` is the run's summary (device, simulated, component …), ``ev`` the
    :class:`~flopwatch.evaluate.splits.EvaluationResult` of its frontier runs, ``sound`` the verifier's
    assessments of its held-out runs (:func:`flopwatch.evaluate.threshold.heldout_assessments`); the numbers are
    :func:`~flopwatch.evaluate.headline.headline_numbers`', each labelled with the kind of data it rests on."""
    num = headline_numbers(ev, sound)
    sim = bool(summary.get("simulated"))
    data_kind = "simulated" if sim else "measured"
    device = str(summary.get("device_name") or summary.get("device")).removesuffix(" (simulated)")
    gain, ystats, held = num["gain_over_yardstick_pp"], num["yardstick"], num["heldout"]
    conf = num["calibrated_interval"]["confidence"]
    lo, hi = num["truth_range_flops"]
    mae, ymae = held["mae_pct"], ystats["mae_pct"]
    at25 = margin_row(num, 25.0, table="calibrated_interval")
    at10 = margin_row(num, 10.0, table="calibrated_interval")
    what = (
        f"SIMULATED: no hardware was measured; every power and energy value comes from flopwatch's simulated "
        f"{device}."
        if sim
        else f"Measured: telemetry of real training runs on {device}."
    )
    verdict = (
        f"On {'the simulated ' if sim else ''}{device}, flopwatch's estimator put unseen runs within "
        f"{pct(mae)} of their true FLOPs on average (no-model yardstick, median J/FLOP: {pct(ymae)}); it "
        f"{_gain_words(gain)}. " + _verdict_words(num, conf)
    )
    supports = (
        f"Estimating held-out runs of this sweep ({sig3(lo)}–{sig3(hi)} FLOP, {summary.get('calibration_dtype')}, "
        f"one {'simulated ' if sim else ''}device, one session): the calibrated interval tells them apart from "
        f"thresholds they exceed by 25 % or more ({share(at25['correct_rate'])} correct, "
        f"{share(at25['wrong_rate'])} wrong) and, less reliably, by 10 % ({share(at10['correct_rate'])} correct, "
        f"{share(at10['uncertain_rate'])} uncertain) — under the calibration's assumptions."
        + _certified_words(num)
    )
    not_supported = (
        (
            "Any accuracy claim about real hardware: the twin's power is close to linear in FLOPs by construction, so "
            "these errors measure the pipeline's handling of sensor noise and detection, not model-form error. "
            if sim
            else ""
        )
        + "Runs outside the calibrated range, in another precision, on another device or driver, or in another "
        "measurement session (idle drift); and thresholds far beyond the sweep (e.g. 10²⁶ FLOP)."
    )
    if gain["p025"] <= 0:
        not_supported += (
            " That the model adds information beyond energy alone: on this data it does not beat the median "
            "J/FLOP yardstick reliably."
        )
    return {
        "schema": HEADLINE_SCHEMA,
        "brief": _brief(num, mae, ymae, gain, conf),
        "what_was_measured": {"kind": data_kind, "device": device, "text": what},
        "heldout": {**held, "component": summary.get("component"), "data": data_kind},
        "yardstick": {
            "name": "median J/FLOP of the calibration runs (no model)",
            **ystats,
            "data": data_kind,
        },
        "gain_over_yardstick_pp": gain,
        "study_models_here": {
            name: {
                **v,
                "data": data_kind,
                "note": f"the study's equation refitted and evaluated here, on {data_kind} data",
            }
            for name, v in num["study_models_here"].items()
        },
        "published": {"source": PUBLISHED_SOURCE, "data": "measured (real Jetson Orin Nano)", **PUBLISHED},
        "verdicts": None
        if num["verdicts"] is None
        else {
            **num["verdicts"],
            "decision": "flopwatch.estimate.verdict.assess with a profile fitted on the split's training runs and "
            "its one threshold rule: 'above' iff the accusation's lower bound > T; 'below' iff the sound upper "
            "bound (physics, datasheet, observed counters) < T and no assumption is violated; else 'uncertain'",
            "heldout": True,
        },
        "calibrated_interval": {
            **num["calibrated_interval"],
            "decision": "the calibrated interval taken as a decision ('above' iff lower end > T, 'below' iff upper "
            "end < T): the estimate's accuracy, not a verdict — it holds only if the workload resembles the "
            "calibration runs",
            "heldout": True,
        },
        "idle_drift": {
            **num["idle_drift"],
            "basis": "±12.5 % of this device's idle power: the Jetson study's repeat sessions idled 0.08 W below "
            "its 0.642 W v2 session (Fowler 2026)",
        },
        "verdict": verdict,
        "supports": supports,
        "does_not_support": not_supported,
    }


def study_models_mae_pct(summary: dict[str, Any]) -> dict[str, float]:
    """eq. 1/eq. 2 held-out MAE *measured in this run*, from a ``run/2`` or a ``run/1`` summary."""
    return dict(summary.get("study_models_heldout_mae_pct") or summary.get("published_models_mae_pct") or {})


def apply_headline(summary: dict[str, Any], ev: Any, sound: Any = None) -> dict[str, Any]:
    """Put the headline into a run's summary (in place; returned too) with the keys derived from it, each computed
    once, in :func:`build_headline`: ``headline``; ``constant_jpf_baseline`` (the yardstick's numbers);
    ``study_models_heldout_mae_pct`` (eq. 1/eq. 2 evaluated here) and ``published_heldout_mae_pct`` (Fowler 2026)."""
    h = summary["headline"] = build_headline(summary, ev, sound)
    y = h["yardstick"]
    summary["constant_jpf_baseline"] = {
        k: y[k] for k in ("mae_pct", "frac_splits_any_over_10pct", "jpf_cv_pct")
    }
    summary["study_models_heldout_mae_pct"] = {k: v["mae_pct"] for k, v in h["study_models_here"].items()}
    summary["published_heldout_mae_pct"] = {k: v["mae_pct"] for k, v in PUBLISHED.items()}
    return summary
