"""Comparison of tensors: metrics (pure numpy), pairing by name, check evaluation."""
