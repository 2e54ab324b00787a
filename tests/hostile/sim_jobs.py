"""A raw training job for the simulator's schedules, shared by the hostile tests (2 TFLOP and 2 GB a step)."""

SIM_JOB = {
    "label": "job",
    "flops_per_step": 2e12,
    "bytes_per_step": 2e9,
    "tokens_per_step": 8192,
    "batch_size": 16,
    "dtype": "fp32",
    "steps": 200,
}
