"""`--inputs` of `trtverify capture` and `trtverify layerwise`: a file (.npz, .npy, Polygraphy's --save-inputs JSON)
or trtexec's raw input files as `'NAME':FILE[,'NAME':FILE]` (trtverify.data.rawinputs), which are read here with
the model's input shapes and types and written as a one-feed Polygraphy inputs JSON the suite then reads."""

from __future__ import annotations

from pathlib import Path

import click

INPUTS = click.option(
    "--inputs",
    "inputs_file",
    metavar="FILE|NAME:FILE,...",
    help=".npz/.npy of inputs (keys = input names, first axis = rows; arrays of exactly a fixed input shape are one "
    "sample), a Polygraphy inputs JSON (--save-inputs: one sample per feed), or trtexec raw input files "
    "'NAME':FILE[,...] (one sample; shapes and types the model's) [default: random inputs].",
)


def resolve_inputs(value: str | None, reference: Path, folder: Path) -> Path | None:
    """The inputs file to give the suite: `value` itself, or for trtexec raw files, `folder`/trtexec_inputs.json."""
    from trtverify.data.kit import polygraphy_inputs
    from trtverify.data.rawinputs import is_raw_spec, read_raw_inputs
    from trtverify.graph.onnxinfo import graph_io, load_io
    from trtverify.util.errors import UsageError

    if value is None:
        return None
    if is_raw_spec(value):
        inputs, _ = graph_io(load_io(reference))
        feed = read_raw_inputs(value, inputs)
        out = folder / "trtexec_inputs.json"
        polygraphy_inputs([feed], out)
        return out
    path = Path(value)
    if not path.is_file():
        raise UsageError(f"--inputs {value}: no such file (trtexec raw files are given as 'NAME':FILE)")
    return path
