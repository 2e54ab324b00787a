"""Regenerate the hostile-input corpus in this folder: ``python tests/hostile/make_corpus.py``.

Every file is synthetic (written here, no published data). One folder per loader (traces/ is not written
here: the trace loaders have their own corpus and test, tests/test_hostile_traces.py); ``MANIFEST.json`` maps
each file to a phrase its one-line error must contain. FIFOs, devices and directories cannot live in git:
tests/test_hostile_corpus.py creates those at test time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEEP = (
    5_000  # nesting depth of the "deep" cases: 5× the recursion limit (100 000 deep: generated at test time)
)
BIG_INT = "9" * 5000  # more digits than Python parses (4300) and far past float64


def good_records() -> list[dict]:
    out = []
    for i in range(8):
        tf = 60 + 12 * i
        t = 120 + 9 * i
        out.append(
            {
                "schema": "flopwatch.record/1",
                "label": f"g{i}",
                "dtype": "fp32",
                "net_energy_j": 5.7 * tf + 3.0 * t + (-1) ** i * 4,
                "duration_s": t,
                "total_flops": tf * 1e12,
                "mean_util": 0.95,
                "tb_moved": 0.05 + 0.004 * i,
            }
        )
    return out


def jsonl(rows: list[dict | str]) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def with_bad(field: str, raw: str, label: str = "bad") -> str:
    """Good records plus one whose ``field`` is the raw JSON text ``raw``."""
    rows: list[dict | str] = list(good_records())
    rec = dict(good_records()[0], label=label)
    rec[field] = "__RAW__"
    rows.append(json.dumps(rec).replace('"__RAW__"', raw))
    return jsonl(rows)


def good_profile() -> dict:
    sys.path.insert(0, str(HERE.parents[1] / "src"))
    from flopwatch.estimate import calibrate
    from flopwatch.records import RecordSet, WorkloadRecord

    recs = [
        WorkloadRecord(
            label=r["label"],
            net_energy_j=r["net_energy_j"],
            duration_s=r["duration_s"],
            total_flops=r["total_flops"],
            mean_util=r["mean_util"],
            tb_moved=r["tb_moved"],
        )
        for r in good_records()
    ]
    d = calibrate(RecordSet(recs, source="good.jsonl"), model="eq2").to_dict()
    d["created"] = "2026-01-01T00:00:00+00:00"
    return d


def csv_text(**override: str) -> str:
    header = [
        "model_name",
        "batch_size",
        "dtype",
        "context_window",
        "warmup_iterations",
        "cooldown_seconds",
        "tokens_per_second_mean",
        "mfu_percentage_calflops_mean",
        "gpu_utilization_mean",
        "power_draw_watts_mean",
        "calflops_total_mean",
        "samples_per_config",
    ]
    rows = []
    for i in range(6):
        row = {
            "model_name": "m",
            "batch_size": str(2**i),
            "dtype": "bfloat16",
            "context_window": "512",
            "warmup_iterations": "5",
            "cooldown_seconds": "5.0",
            "tokens_per_second_mean": str(100.0 * (i + 1)),
            "mfu_percentage_calflops_mean": str(5.0 + 6 * i),
            "gpu_utilization_mean": str(40.0 + 9 * i),
            "power_draw_watts_mean": str(120.0 + 30 * i),
            "calflops_total_mean": "2.0e11",
            "samples_per_config": "50",
        }
        if i == 5:
            row.update(override)
        rows.append(",".join(row[h] for h in header))
    return ",".join(header) + "\n" + "\n".join(rows) + "\n"


def main() -> None:
    files: dict[str, tuple[str | bytes, str]] = {}

    def add(name: str, content: str | bytes, expect: str) -> None:
        files[name] = (content, expect)

    # ---- records (run through `calibrate FILE -o OUT`)
    add("records/int_too_big_for_float.jsonl", with_bad("net_energy_j", "1" + "0" * 400), "out of range")
    add("records/int_5000_digits.jsonl", with_bad("total_flops", BIG_INT), "out of range")
    add("records/float_1e999.jsonl", with_bad("duration_s", "1e999"), "out of range")
    add("records/nan_literal.jsonl", with_bad("net_energy_j", "NaN"), "is NaN")
    add("records/infinity_literal.jsonl", with_bad("total_flops", "Infinity"), "is infinite")
    add("records/negative_duration.jsonl", with_bad("duration_s", "-120"), "field 'duration_s'")
    add("records/negative_energy.jsonl", with_bad("net_energy_j", "-1.5"), "field 'net_energy_j'")
    add("records/negative_flops.jsonl", with_bad("total_flops", "-6e13"), "field 'total_flops'")
    add("records/duration_1e-300.jsonl", with_bad("duration_s", "1e-300"), "implausibly short")
    add("records/util_in_percent.jsonl", with_bad("mean_util", "95"), "field 'mean_util'")
    add("records/util_negative.jsonl", with_bad("mean_util", "-0.2"), "field 'mean_util'")
    add("records/power_megawatts.jsonl", with_bad("net_energy_j", "3e9"), "plausibility bound")
    h100 = dict(
        good_records()[0], label="h100", device_name="NVIDIA H100 80GB HBM3", net_energy_j=20_000.0 * 120
    )
    add("records/power_above_8x_tdp.jsonl", jsonl([*good_records(), h100]), "700 W TDP")
    add("records/flop_rate_impossible.jsonl", with_bad("total_flops", "6e25"), "plausibility bound")
    add("records/label_is_object.jsonl", with_bad("label", '{"a": 1}'), "field 'label'")
    add("records/energy_is_string.jsonl", with_bad("net_energy_j", '"lots"'), "must be a number")
    add("records/energy_is_list.jsonl", with_bad("net_energy_j", "[1, 2]"), "must be a number")
    add("records/deep_nesting.jsonl", "[" * DEEP + "\n", "nested more than")
    add(
        "records/deep_nesting_in_field.jsonl", with_bad("config", "[" * DEEP + "]" * DEEP), "nested more than"
    )
    add(
        "records/deep_nesting_seed.json",
        '{"records": ' + "[" * DEEP + "]" * DEEP + "}",
        "nested more than",
    )
    add(
        "records/seed_tf_too_big.json",
        json.dumps({"records": [{"label": "a"}]}).replace(
            '{"label": "a"}', '{"label": "a", "ground_truth_tf": ' + BIG_INT + "}"
        ),
        "out of range",
    )
    add("records/records_not_a_list.json", '{"records": 5}', "field 'records'")
    add("records/empty_array.json", "[]", "no records")
    add("records/top_level_string.jsonl", '"hello"\n', "expected a JSON object")
    add("records/binary_garbage.jsonl", bytes(range(256)) * 4, "not UTF-8")
    add("records/latin1.jsonl", '{"label": "caf\xe9"}\n'.encode("latin-1"), "not UTF-8")
    add("records/nul_bytes.jsonl", b"\x00" * 64, "invalid JSON")
    add("records/truncated.jsonl", jsonl(good_records())[:-40], "invalid JSON")
    add("records/whitespace_only.jsonl", "\n \n\t\n", "empty")

    # ---- profiles (run through `estimate --profile FILE good.jsonl`)
    prof = good_profile()

    def mutated(path: str, value_raw: str) -> str:
        d = json.loads(json.dumps(prof))
        node = d
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = "__RAW__"
        return json.dumps(d, indent=2).replace('"__RAW__"', value_raw)

    pname = next(iter(prof["params"]))
    add("profile/param_int_too_big.json", mutated(f"params.{pname}", BIG_INT), "too large for a 64-bit float")
    add("profile/param_1e999.json", mutated(f"params.{pname}", "1e999"), f"params.{pname}")
    add("profile/param_nan.json", mutated(f"params.{pname}", "NaN"), f"params.{pname}")
    add("profile/param_string.json", mutated(f"params.{pname}", '"x"'), f"params.{pname}")
    add("profile/zero_width_interval.json", mutated("interval.log_halfwidth", "0"), "zero-width")
    add("profile/negative_interval.json", mutated("interval.log_halfwidth", "-0.1"), "interval.log_halfwidth")
    rng_key = next(iter(prof["training"]["ranges"]))
    lo, hi = prof["training"]["ranges"][rng_key]
    add(
        "profile/inverted_range.json",
        mutated(f"training.ranges.{rng_key}", json.dumps([hi + 1, lo])),
        "inverted",
    )
    add(
        "profile/range_not_pair.json",
        mutated(f"training.ranges.{rng_key}", "[1]"),
        f"training.ranges.{rng_key}",
    )
    add("profile/confidence_percent.json", mutated("confidence", "95"), "field 'confidence'")
    add("profile/idle_negative.json", mutated("idle_power_w", "-3"), "field 'idle_power_w'")
    add("profile/loo_mae_nan.json", mutated("diagnostics.loo_mae_pct", "NaN"), "diagnostics.loo_mae_pct")
    add(
        "profile/residuals_not_list.json",
        mutated("interval.residuals_log_ratio", '"x"'),
        "residuals_log_ratio",
    )
    add("profile/min_util_percent.json", mutated("training.filters.min_util", "80"), "min_util")
    add("profile/unknown_model.json", mutated("model", '"eq99"'), "field 'model'")
    add("profile/deep_nesting.json", "[" * DEEP, "nested more than")
    add("profile/deep_nesting_in_fingerprint.json", mutated("fingerprint", "[" * DEEP + "]" * DEEP), "nested")
    add("profile/binary_garbage.json", bytes(range(256)), "not UTF-8")
    add("profile/empty.json", "", "empty")

    # ---- MASCOTS aggregate CSVs (run through `powermodel fit FILE --gpu A100 -o OUT`)
    add("csv/negative_power.csv", csv_text(power_draw_watts_mean="-20"), "power_draw_watts_mean")
    add("csv/power_glitch_999999999999.csv", csv_text(power_draw_watts_mean="999999999999"), "TDP")
    add("csv/power_infinite.csv", csv_text(power_draw_watts_mean="inf"), "infinite")
    add("csv/power_int_too_big.csv", csv_text(power_draw_watts_mean="1" + "0" * 400), "power_draw_watts_mean")
    add("csv/mfu_over_100.csv", csv_text(mfu_percentage_calflops_mean="180"), "mfu_percentage_calflops_mean")
    add("csv/util_negative.csv", csv_text(gpu_utilization_mean="-1"), "gpu_utilization_mean")
    add("csv/util_over_100.csv", csv_text(gpu_utilization_mean="250"), "gpu_utilization_mean")
    add("csv/batch_zero.csv", csv_text(batch_size="0"), "batch_size")
    add("csv/power_not_a_number.csv", csv_text(power_draw_watts_mean="hot"), "not a number")
    add("csv/header_only.csv", csv_text().splitlines()[0] + "\n", "no data rows")
    add("csv/missing_columns.csv", "a,b\n1,2\n", "missing required column")
    add("csv/binary_garbage.csv", bytes(range(256)) * 8, "not a readable CSV")
    add("csv/empty.csv", "", "not a readable CSV")

    # ---- simulator schedules (run through `sim trace --device a100 --schedule FILE -o OUT`)
    wl = {"label": "w", "flops_per_step": 1e12, "bytes_per_step": 1e9, "tokens_per_step": 1024, "steps": 10}
    add("schedule/deep_nesting.json", "[" * DEEP, "nested more than")
    add("schedule/deep_nesting.toml", "schedule = " + "[" * DEEP, "nested more than")
    add(
        "schedule/steps_int_too_big.json",
        json.dumps([dict(wl, steps=0)]).replace('"steps": 0', '"steps": ' + BIG_INT),
        "out of range",
    )
    add(
        "schedule/steps_int_too_big.toml",
        "[[schedule]]\nlabel = 'w'\nsteps = " + BIG_INT + "\n",
        "invalid TOML",
    )
    add("schedule/steps_negative.json", json.dumps([dict(wl, steps=-5)]), "field 'steps'")
    add("schedule/steps_absurd.json", json.dumps([dict(wl, steps=1e30)]), "sanity bound")
    add(
        "schedule/duration_1e999.json",
        json.dumps([{**{k: v for k, v in wl.items() if k != "steps"}, "duration_s": 0}]).replace(
            '"duration_s": 0', '"duration_s": 1e999'
        ),
        "out of range",
    )
    add("schedule/idle_nan.json", '[{"idle_s": NaN}]', "field 'idle_s'")
    add("schedule/idle_inf.toml", "[[schedule]]\nidle_s = inf\n", "field 'idle_s'")
    add(
        "schedule/warmup_not_a_number.json",
        json.dumps([dict(wl, warmup_steps="abc")]),
        "field 'warmup_steps'",
    )
    add("schedule/steps_bool.json", json.dumps([dict(wl, steps=True)]), "field 'steps'")
    add("schedule/not_a_list.json", '{"schedule": 5}', "schedule")
    add("schedule/unknown_item.json", "[5]", "unrecognised schedule item")
    add("schedule/invalid.toml", "[[schedule\n", "invalid TOML")
    add("schedule/binary_garbage.json", bytes(range(256)), "not UTF-8")

    # ---- fleet schedules (run through `sim openmetrics --schedule FILE -o OUT`)
    job = {"name": "j", "gpus": 8, "start_h": 0, "hours": 1, "workload": "llm-1b-bf16"}
    add("fleet_schedule/deep_nesting.json", '{"jobs": ' + "[" * DEEP + "]" * DEEP + "}", "nested more than")
    add(
        "fleet_schedule/gpus_5000_digits.json",
        json.dumps([job]).replace('"gpus": 8', '"gpus": ' + BIG_INT),
        "gpus",
    )
    add(
        "fleet_schedule/start_nan.json",
        json.dumps([job]).replace('"start_h": 0', '"start_h": NaN'),
        "record 'j'",
    )
    add("fleet_schedule/hours_inf.toml", "[[jobs]]\nname = 'j'\ngpus = 8\nhours = inf\n", "record 'j'")
    raw = dict(job, workload={"flops_per_step": -1.0e12})
    add("fleet_schedule/negative_flops.json", json.dumps([raw]), "flops_per_step > 0")
    add("fleet_schedule/invalid.toml", "[[jobs\n", "invalid TOML")

    # ---- monitor TOML configs (run through `monitor --config FILE`): refused while loading, before any work
    add("config/deep_nesting.toml", "sensors = " + "[" * DEEP, "nested more than")
    add("config/int_5000_digits.toml", "metrics_port = " + BIG_INT + "\n", "invalid TOML")
    add("config/monitor_not_a_table.toml", "monitor = 3\n", "field 'monitor'")
    add("config/unknown_setting.toml", "[monitor]\nrm_rf = true\n", "unknown setting")
    add("config/port_string.toml", "[monitor]\nmetrics_port = 'http'\n", "field 'metrics_port'")
    add("config/invalid.toml", "[monitor\n", "invalid TOML")
    add("config/binary_garbage.toml", bytes(range(256)), "not UTF-8")

    # ---- power-model JSON (run through `powermodel predict --model FILE …`)
    add("powermodel/deep_nesting.json", "{" + '"a":{' * DEEP, "nested more than")
    add("powermodel/not_an_object.json", "[1, 2]", "not a JSON object")
    add("powermodel/int_too_big.json", '{"schema": ' + BIG_INT + "}", "not a flopwatch power model")

    # only the folders written here (tests/hostile/traces/ belongs to the trace loaders' own corpus)
    for folder in {name.split("/")[0] for name in files}:
        for old in (HERE / folder).glob("*"):
            if old.is_file():
                old.unlink()
    manifest = {}
    for name, (content, expect) in sorted(files.items()):
        p = HERE / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
        manifest[name] = expect
    (HERE / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(f"{len(files)} files written under {HERE}")


if __name__ == "__main__":
    main()
