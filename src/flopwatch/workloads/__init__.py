"""Sample training workloads with exact ground-truth FLOPs (torch imported lazily, per module).

- ``config``: frozen dataclass configs (``EncoderConfig`` = the Jetson study's "seed-encoder",
  ``GPTConfig``), ``make_config``, device checks. Torch-free.
- ``seed_encoder`` / ``gpt``: the two model families, one readable file each; ``model``: dispatch.
- ``ground_truth.count_flops``: FlopCounterMode on the meta device, once per config (cached).
- ``formulas``: closed form, PaLM / Chinchilla / Megatron, ``bytes_per_step``, ``describe``. Torch-free.
- ``sweeps``: named sweeps (``jetson-fp32``, ``jetson-precision``, ``datacenter``, ``quick``).
- ``run.run_workload``: train, time (after warm-up) and append a record.

See ``docs/workloads.md``.
"""
