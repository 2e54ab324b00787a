"""Job- and GPU-level recording rules at span resolution (:data:`flopwatch.fleet.rules.JOB_RULES`, ``GPU_RULES``).

What the estimators use only summed over a job (pipe activity × SM clock, SM activity, the pipes without a peak, the
power limit) is read once per fleet from the job-level rules, one series per job, node and model, instead of once per
GPU-job series and query; whether a GPU's energy counter fell comes from the GPU-level rules, one series per GPU.
:class:`JobLevel` decides whether they can stand in (:meth:`JobLevel._plan`), sends their queries and folds the
answers; :class:`~flopwatch.fleet.span.SpanReader` reads the rest per GPU-job.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flopwatch.fleet.reader import _ms_range
from flopwatch.telemetry import dcgm_metrics as M
from flopwatch.telemetry.prom_client import VectorAnswer

if TYPE_CHECKING:
    from flopwatch.fleet.reader import FleetReader, ReadPlan

#: Group labels (``--by pod|job``) whose groups are single jobs: where the job-level rules stand in.
JOB_GROUPINGS = frozenset({"pod", "exported_pod", "hpc_job"})
#: Job-level queries (:data:`flopwatch.fleet.rules.JOB_RULES` names, HMMA standing in for the tensor pipe where
#: present) and how their per-window values combine over the range.
JOB_QUERIES: tuple[tuple[str, str], ...] = (
    ("tensor_af", "sum"),
    ("tensor_a", "sum"),
    ("fp32_af", "sum"),
    ("fp32_a", "sum"),
    ("sm_a", "sum"),
    ("imma_a", "sum"),
    ("dfma_a", "sum"),
    ("fp16_a", "sum"),
    ("fp64_a", "sum"),
    ("plimit_max", "max"),
    ("plimit_min", "min"),
)


#: GPU-level queries: the summed window resets, and the falls of the per-window maximum (``resets()`` of it).
GPU_QUERIES: tuple[tuple[str, str], ...] = (("gpu_resets", "sum_over_time"), ("gpu_max", "resets"))


@dataclass
class JobPipes:
    """What the job-level rules say of one (group, device model) over the range: ∫ activity dt and ∫ activity ×
    SM clock dt per pipe (s and MHz·s), SM activity, power limit (NaN where absent)."""

    values: dict[str, float] = field(default_factory=dict)

    def get(self, key: str) -> float:
        return self.values.get(key, math.nan)


class JobLevel:
    """The job- and GPU-level rules of one estimate: which stand in (:attr:`rules`, or :attr:`note` says why not),
    their queries, and the GPUs whose counter fell (:attr:`fell_gpus`)."""

    def __init__(
        self,
        reader: FleetReader,
        by_labels: tuple[str, ...],
        *,
        plan: bool = True,
        planned: tuple[dict[str, str], str] | None = None,
    ) -> None:
        """``plan``: rules are read at all (else nothing stands in and nothing is asked); ``planned``:
        :meth:`plan_rules`'s answer, when already asked (alongside the reader's own checks)."""
        self.reader = reader
        self.by_labels = by_labels
        #: rule series per :data:`JOB_QUERIES` / :data:`GPU_QUERIES` name
        self.rules: dict[str, str] = {}
        self.note = ""
        self.fell_gpus: set[str] = set()
        if plan:
            self.rules, self.note = planned if planned is not None else self.plan_rules(reader, by_labels)

    @property
    def used(self) -> bool:
        return bool(self.rules)

    @property
    def rise(self) -> str | None:
        """The counter's rise rule series, where it stands for the per-GPU-job max and min."""
        return self.rules.get("e_rise")

    @property
    def gpu_resets(self) -> bool:
        return "gpu_max" in self.rules and "gpu_resets" in self.rules

    @staticmethod
    def plan_rules(
        reader: FleetReader, by_labels: tuple[str, ...], plan: ReadPlan | None = None
    ) -> tuple[dict[str, str], str]:
        """The job- and GPU-level rules to read over ``plan`` (the reader's by default) (:data:`JOB_QUERIES` name
        → series), or why not.

        Job-level rules keep only the job labels and the model, so they stand in only when the groups (``--by``)
        and the ``--selector`` use those labels. Every rule the present metrics need must exist, lie on the
        per-GPU rules' window grid (one rule group: one evaluation offset) and cover the range's first and last
        window as the per-GPU rules do. GPU-level rules (the counter's falls) are read for the whole fleet, the
        selector aside: a reset is the GPU's, whatever job it ran.
        """
        import re

        from flopwatch.fleet.rules import (
            GPU_RULE_LABELS,
            JOB_RULE_LABELS,
            reader_job_rule,
            reader_rule,
            rule_names,
        )

        p, present, client = plan or reader.plan, reader.present, reader.client
        W = p.window_s
        if not set(by_labels) <= set(JOB_RULE_LABELS):
            return {}, f"job-level rules not used: they do not keep {', '.join(by_labels)}"
        if not set(by_labels) <= JOB_GROUPINGS:
            # a namespace or a node holds several jobs: the dtype (which pipe did the work) and with it the pipe
            # peaks are per GPU-job on the per-GPU path; summed over the group they would be one for all
            return {}, (
                f"job-level rules not used: a {'/'.join(by_labels)} group holds several jobs (dtype and pipe "
                "peaks are per job): pipes read per GPU"
            )
        unquoted = re.sub(r'"(?:[^"\\]|\\.)*"', "", p.matchers)
        used = set(re.findall(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)", unquoted))
        if not used <= set(JOB_RULE_LABELS):
            return (
                {},
                f"job-level rules not used: --selector uses {', '.join(sorted(used - set(JOB_RULE_LABELS)))}",
            )
        names = [q for q, _op in JOB_QUERIES] + [q for q, _op in GPU_QUERIES]
        want = {q: r for q in names if (r := reader_job_rule(q, present, W)) is not None}
        if not any(q for q in want if q not in dict(GPU_QUERIES)):
            return {}, ""
        have = reader.rule_names
        if have is None:
            have = rule_names(client, W, p.start, p.end + W)
        lacking = sorted(r for r in want.values() if r not in have)
        if lacking:
            return {}, f"job-level rules missing ({', '.join(lacking[:3])}): pipes read per GPU"
        # (job- or GPU-level rule, the per-GPU-job rule of the same metric, the labels it sums by, selector)
        ref = next(
            q
            for q in ("tensor_a", "fp32_a", "sm_a", "fp16_a", "fp64_a", "imma_a", "dfma_a", "plimit_max")
            if q in want
        )
        per_gpu = {"tensor_a": "tensor_avg", "plimit_max": "plimit"}.get(ref, ref.replace("_a", "_avg"))
        checks = [(want[ref], reader_rule(per_gpu, present, W), JOB_RULE_LABELS, p.matchers)]
        if "gpu_max" in want:
            checks.append((want["gpu_max"], reader_rule("e_max", present, W), GPU_RULE_LABELS, ""))
        rng = _ms_range(W, client.version() < (3, 0))
        n_win = max(1, math.ceil((p.end - p.start) / W - 1e-9))
        times = sorted({p.start + W, p.start + n_win * W})
        from concurrent.futures import ThreadPoolExecutor

        # the counter's rise rule (rules.SERIES_RULES) stands in for its max and min where the GPU-level rules
        # route the GPUs whose counter fell to window resolution, and where it has a sample for every series the
        # per-GPU-job rules have (a rules file from before it lacks it; one loaded later lacks the early windows);
        # and the count rule covers the window before the range (which series the range cut: SpanReader._fold)
        rise = reader_rule("e_rise", present, W)
        e_last, e_n = reader_rule("e_last", present, W), reader_rule("e_n", present, W)
        ask_rise = rise is not None and rise in have and e_last is not None and "gpu_max" in want
        rise_note = (
            "" if ask_rise or rise is None or rise in have else f"no {rise} rule: counter read as max − min"
        )
        # all at once: these round trips are on the estimate's critical path, before any chunk is read
        with ThreadPoolExecutor(max_workers=8) as pool:
            sel = f"{{{p.matchers}}}" if p.matchers else ""
            unless = "count(last_over_time({a}{sel}[{rng}]) unless last_over_time({b}{sel}[{rng}]))"
            rise_asked = [
                pool.submit(client.query, unless.format(a=e_last, b=rise, sel=sel, rng=rng), t)
                for t in (times if ask_rise else ())
            ]
            if ask_rise:
                rise_asked.append(
                    pool.submit(client.query, unless.format(a=M.ENERGY, b=e_n, sel=sel, rng=rng), p.start)
                )
            asked = []
            for rule, gpu_rule, labels, m in checks:
                sel = f"{{{m}}}" if m else ""
                by = ", ".join(labels)
                for t in times:
                    asked.append(
                        (
                            rule,
                            t,
                            pool.submit(client.query_matrix, f"{rule}{sel}[{rng}]", t),
                            pool.submit(
                                client.query,
                                f"count(count by ({by}) (last_over_time({gpu_rule}{sel}[{rng}])))",
                                t,
                            ),
                        )
                    )
        reader.n_queries += 2 * len(asked) + len(rise_asked)
        for rule, t, f_job, f_gpu in asked:
            job_samples, g = f_job.result(), f_gpu.result()
            # on the per-GPU rules' grid (plan.start was put there); rules loaded from another group or file are
            # evaluated at another offset within the window
            for s_ in job_samples:
                off = round(((float(s_.t[0]) - p.start) % W) * 1000) / 1000 if len(s_.t) else 0.0
                if off not in (0.0, W):
                    return {}, (
                        f"{rule} samples are {off:g} s off the per-GPU rules' window grid (another rule group or "
                        "file?): pipes read per GPU"
                    )
            nj, ng = sum(1 for s_ in job_samples if len(s_.t)), int(g[0].v[0]) if g else 0
            if nj < ng:
                return {}, (
                    f"job-level rules do not cover the span: {nj} of {ng} have a {rule} sample in the window "
                    f"ending {t:.0f}: pipes read per GPU"
                )
        if ask_rise:
            lacking_rise = [int(a[0].v[0]) for f in rise_asked if (a := f.result()) and len(a[0].v)]
            if any(lacking_rise):
                rise_note = (
                    f"{rise} (or the count rule in the window before the range) does not cover the span "
                    f"({max(lacking_rise)} series without it): counter read as max − min"
                )
            else:
                want["e_rise"] = str(rise)
        return want, rise_note

    def submit(self, pool: ThreadPoolExecutor, R: str, t_end: float) -> dict[str, Future[VectorAnswer]]:
        """Send the job- and GPU-level queries over the range ``R`` ending at ``t_end`` (once per fleet: one number
        per job, node and model, or per GPU)."""
        from flopwatch.fleet.rules import GPU_RULE_LABELS, JOB_RULE_LABELS

        p = self.reader.plan
        out = {}
        for q, op in JOB_QUERIES:
            rule = self.rules.get(q)
            if rule is None:
                continue
            sel = f"{rule}{{{p.matchers}}}" if p.matchers else rule
            expr = f"{op} by ({', '.join(JOB_RULE_LABELS)}) ({op}_over_time({sel}[{R}]))"
            out[q] = pool.submit(self.reader.client.query_values, expr, t_end)
        for q, fn in GPU_QUERIES:
            rule = self.rules.get(q)
            if rule is not None:  # the whole fleet's GPUs: a few thousand series at most
                expr = f"sum by ({', '.join(GPU_RULE_LABELS)}) ({fn}({rule}[{R}]))"
                out[q] = pool.submit(self.reader.client.query_values, expr, t_end)
        return out

    def collect(
        self, futs: Mapping[str, Future[VectorAnswer]], tick: Callable[[], None]
    ) -> dict[str, dict[str, JobPipes]]:
        """group → device model → :class:`JobPipes` (activity sums in seconds: × step, as the per-GPU fold); the
        GPUs whose counter fell go to :attr:`fell_gpus`."""
        step = self.reader.plan.step_s
        out: dict[str, dict[str, JobPipes]] = {}
        gpu_q = dict(GPU_QUERIES)
        for q, f in futs.items():
            labs, vals = f.result()
            tick()
            xs = vals.tolist()
            if q in gpu_q:
                self.fell_gpus |= {M.gpu_id(lab) for lab, x in zip(labs, xs, strict=True) if x > 0}
                continue
            # one series per job, node and model: sums add up, the power limit's extremes stay extremes
            combine = {"plimit_max": max, "plimit_min": min}.get(q)
            for lab, x in zip(labs, xs, strict=True):
                group = M.group_key(lab, self.by_labels)
                if group is None or not math.isfinite(x):
                    continue
                jp = out.setdefault(group, {}).setdefault(lab.get("modelName", ""), JobPipes())
                if combine is not None:
                    jp.values[q] = combine(jp.values[q], x) if q in jp.values else x
                else:
                    jp.values[q] = jp.values.get(q, 0.0) + x * step
        return out
