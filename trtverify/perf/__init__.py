"""Latency measurement with a stability rule, and performance baselines with an environment fingerprint."""
