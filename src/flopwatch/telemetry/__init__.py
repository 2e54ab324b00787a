"""Telemetry: sensors, the fixed-rate sampler, traces (Parquet) and energy integration."""
