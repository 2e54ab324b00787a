#!/usr/bin/env bash
# One short, prepared real-GPU check (about 10 minutes on an H100/H200-class machine). It runs what only a
# GPU can show and writes everything under ${OUT:-gpu_check_out}/ for the closing note:
#   1. `flopwatch sensors` and a 30 s `flopwatch record` on NVML            (issue 3)
#   2. a few sweep workloads really training, with TFLOP/s and MFU          (issue 4)
#   3. a small `flopwatch bench` grid with the MASCOTS protocol and its fit (issue 5)
#   4. `pytest -m gpu` (fused-attention counts, CUDA records, TF32 switch)  (issue 4)
#   5. `flopwatch run --device cuda --budget-s 420`                          (issue 6)
# Ordered by what matters most if the device time runs out: sensors, the end-to-end run, then the rest.
set -uo pipefail
out="${OUT:-gpu_check_out}"
mkdir -p "$out"
log() { echo "== $*" | tee -a "$out/log.txt"; }
pip install -q torch==2.13.0 2>/dev/null || true   # harmless where a CUDA torch is already present
pip install -q -e '.[dev,torch,nvidia]' >"$out/pip.txt" 2>&1
nvidia-smi >"$out/nvidia-smi.txt" 2>&1
log "sensors";   flopwatch sensors --json >"$out/sensors.json" 2>>"$out/log.txt"; flopwatch sensors | tee -a "$out/log.txt"
log "record 30 s"; flopwatch record --sensor nvml:0 --rate 10 --duration 30 -o "$out/idle30.parquet" 2>&1 | tail -5 | tee -a "$out/log.txt"
log "detect";    flopwatch detect "$out/idle30.parquet" --json >"$out/idle30_detect.json" 2>>"$out/log.txt"
log "run --device cuda"; timeout 560 flopwatch run --device cuda --budget-s 420 -o "$out/run" 2>&1 | tail -25 | tee -a "$out/log.txt"
cp "$out/run/summary.json" "$out/summary.json" 2>/dev/null || true
for label in $(flopwatch workload sweeps datacenter --json | python -c 'import json,sys; print(" ".join(c["label"] for c in json.load(sys.stdin)[:3]))'); do
  log "workload $label"
  timeout 120 flopwatch workload run --sweep datacenter --label "$label" --device cuda --seconds 20 \
    --records "$out/workloads.jsonl" 2>&1 | tail -8 | tee -a "$out/log.txt"
done
log "bench"; timeout 240 flopwatch bench --device cuda --arch gpt --d-model 1024 --seq-len 512 --num-layers 8 \
  --batch 1,64 --dtype fp32,bf16 --min-samples 10 --max-samples 50 --cooldown-s 2 -o "$out/bench.csv" --fit 2>&1 \
  | tail -15 | tee -a "$out/log.txt"
log "pytest -m gpu"; timeout 300 python -m pytest -q -m gpu 2>&1 | tail -5 | tee -a "$out/log.txt"
log "done"
