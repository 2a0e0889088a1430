"""Command `trtverify init` (registered on the main group in cli/main.py): a commented suite for a model."""

from __future__ import annotations

from pathlib import Path

import click

from trtverify.cli.options import OnnxFile, Several


@click.command()
@click.argument("model", type=OnnxFile())
@click.option(
    "--pytorch",
    metavar="MODULE:CALLABLE",
    help="The PyTorch source of MODEL: a function returning the nn.Module (adds the framework stage).",
)
@click.option(
    "--weights",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="With --pytorch: a state_dict file the model is loaded with.",
)
@click.option(
    "--candidate",
    "candidates",
    cls=Several,
    type=OnnxFile(),
    help="A candidate ONNX model (several values, or repeat it) [default: an FP16 recipe made from MODEL].",
)
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(path_type=Path, dir_okay=False),
    default=Path("suite.yaml"),
    show_default=True,
    help="Where to write the suite.",
)
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
def init(
    model: Path, pytorch: str | None, weights: Path | None, candidates: tuple[Path, ...], output: Path, force: bool
) -> None:
    """Write a commented suite for MODEL.onnx: inputs generated from its input shapes, the stages that
    apply (framework with --pytorch, layerwise), e2e and perf as commented examples."""
    from trtverify.suitegen.init import suite_text
    from trtverify.util.errors import UsageError
    from trtverify.util.fsutil import atomic_write_text, writable_folder

    if output.exists() and not force:
        raise UsageError(f"{output} exists; pass --force to overwrite it, or -o another path")
    text = suite_text(model, output, pytorch=pytorch, weights=weights, candidates=candidates)
    writable_folder(output.parent if str(output.parent) else Path("."), "-o")
    atomic_write_text(output, text)
    click.echo(f"wrote {output}\n  check it: trtverify validate {output}\n  run it:   trtverify run {output}")
