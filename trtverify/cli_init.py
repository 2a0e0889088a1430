"""Command `trtverify init` (registered on the main group in cli.py): a commented suite for a model."""

from __future__ import annotations

import click


@click.command()
def init() -> None:
    """Write a commented suite for an ONNX model (not written yet)."""
    raise click.UsageError("not implemented yet")
