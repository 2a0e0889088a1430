"""Precision repair: the smallest FP32 keep-list that makes a lowered model pass, verified."""
