"""Comparing tensors: metrics (pure numpy), pairing by name, and checks evaluated over samples."""
