#!/usr/bin/env bash
# Prepared real-GPU checks, in stages that each fit one 10-minute device command. Everything goes under
# ${OUT:-gpu_check_out}/ (log.txt collects what to quote in the closing note).
#
#   STAGES="setup sensors run" bash scripts/gpu_check.sh      # ~9 min: issue 3 (sensors, 30 s record) + issue 6
#   STAGES="setup workloads bench pytest" bash scripts/gpu_check.sh   # ~6 min: issues 4 and 5
#
#   sensors    `flopwatch sensors` and a 30 s `flopwatch record` on NVML            (issue 3)
#   run        `flopwatch run --device cuda --budget-s 420`                       (issue 6)
#   workloads  three datacenter-sweep workloads really training: TFLOP/s and MFU     (issue 4)
#   bench      a small `flopwatch bench` grid with the MASCOTS protocol and its fit  (issue 5)
#   pytest     `pytest -m gpu`: fused-attention counts, CUDA records, TF32 switch    (issue 4)
#   pipe       pipe-activity estimator (NVML GPM tensor activity × peak × clock) vs ground truth  (issue 12, ~3 min)
set -uo pipefail
out="${OUT:-gpu_check_out}"
stages="${STAGES:-setup sensors run}"
mkdir -p "$out"
log() { echo "== $*" | tee -a "$out/log.txt"; }
has() { [[ " $stages " == *" $1 "* ]]; }

# The device image has torch, nvidia-ml-py, numpy/pandas/pyarrow, typer and rich but no network: run from
# the source tree instead of installing (cryptography, needed only by the monitor, may be missing there).
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
fw() { python3 -m flopwatch "$@"; }
if has setup; then
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1
  python3 -c "import torch, pynvml, pandas, pyarrow, typer, rich; print('torch', torch.__version__, torch.cuda.get_device_name(0))" \
    2>&1 | tee -a "$out/log.txt"
fi
if has sensors; then
  log "sensors"; fw sensors --json >"$out/sensors.json" 2>>"$out/log.txt"; fw sensors | tee -a "$out/log.txt"
  log "record 30 s"
  fw record --sensor nvml:0 --rate 10 --duration 30 -o "$out/idle30.parquet" 2>&1 | tail -5 | tee -a "$out/log.txt"
  fw detect "$out/idle30.parquet" --json >"$out/idle30_detect.json" 2>>"$out/log.txt"
fi
if has run; then
  log "run --device cuda --budget-s 420"
  timeout 540 fw run --device cuda --budget-s 420 -o "$out/run" 2>&1 | tail -25 | tee -a "$out/log.txt"
  cp "$out/run/summary.json" "$out/summary.json" 2>/dev/null || true
fi
if has workloads; then
  for label in $(fw workload sweeps datacenter --json \
      | python -c 'import json,sys; print(" ".join(c["label"] for c in json.load(sys.stdin)[:3]))'); do
    log "workload $label"
    timeout 120 fw workload run --sweep datacenter --label "$label" --device cuda --seconds 20 \
      --records "$out/workloads.jsonl" 2>&1 | tail -8 | tee -a "$out/log.txt"
  done
fi
if has bench; then
  log "bench"
  timeout 200 fw bench --device cuda --arch gpt --d-model 1024 --seq-len 512 --num-layers 8 \
    --batch 1,64 --dtype fp32,bf16 --min-samples 10 --max-samples 50 --cooldown-s 2 -o "$out/bench.csv" --fit 2>&1 \
    | tail -15 | tee -a "$out/log.txt"
fi
if has pytest; then
  log "pytest -m gpu"; timeout 200 python -m pytest -q -m gpu 2>&1 | tail -5 | tee -a "$out/log.txt"
fi
if has pipe; then
  # The fleet's pipe estimator (flopwatch.fleet.estimators) on one GPU: GPM's tensor activity stands in for
  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE. Error = pipe estimate / ground-truth FLOPs (FlopCounterMode) − 1.
  log "pipe-activity estimator vs ground truth"
  fw record --sensor nvml:0 --rate 10 --duration 170 -o "$out/pipe.parquet" >"$out/pipe_record.txt" 2>&1 &
  rec=$!
  sleep 5
  for label in $(fw workload sweeps datacenter --json \
      | python -c 'import json,sys; print(" ".join(c["label"] for c in json.load(sys.stdin)[:2]))'); do
    timeout 75 fw workload run --sweep datacenter --label "$label" --device cuda --seconds 40 \
      --records "$out/pipe.jsonl" 2>&1 | tail -3 | tee -a "$out/log.txt"
  done
  wait "$rec"
  python3 - "$out/pipe.parquet" "$out/pipe.jsonl" <<'PY' 2>&1 | tee -a "$out/log.txt"
import json, sys
import numpy as np
from flopwatch.devices import get_device
from flopwatch.telemetry.reading import Trace
tr = Trace.read(sys.argv[1]).samples
col = "extra_tensor_util" if "extra_tensor_util" in tr else None
if col is None:
    sys.exit("no GPM tensor activity in the trace (GPM unsupported or not permitted): pipe stage skipped")
spec = get_device("h200")
wall = tr["wall_time"].astype("int64").to_numpy() / 1e9
dt = np.diff(wall, append=wall[-1])
a = tr[col].to_numpy(float)
f = tr["sm_clock_mhz"].to_numpy(float) / spec.max_sm_clock_mhz
for line in open(sys.argv[2]):
    r = json.loads(line)
    m = (wall >= r["start_wall"]) & (wall < r["end_wall"])
    d = r.get("dtype", "bf16")
    peak = spec.peak("tf32" if d == "fp32" else d)  # fp32 matmuls use the tensor pipe only with TF32 on
    est = float(np.nansum(a[m] * f[m] * dt[m]) * peak)
    true = float(r["total_flops"])
    print(f"pipe {r['label']} {d}: tensor activity {np.nanmean(a[m]):.2f}, estimate {est:.3e} vs ground truth "
          f"{true:.3e} FLOPs: error {100 * (est / true - 1):+.1f} %")
PY
fi
log "done: $stages"
