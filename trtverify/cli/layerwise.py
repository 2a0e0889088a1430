"""Command `trtverify layerwise` (registered on the main group in cli/main.py): a layerwise run without a suite file."""

from __future__ import annotations

from pathlib import Path

import click

from trtverify.cli.inputsarg import INPUTS, resolve_inputs
from trtverify.cli.options import PLUGIN, QUIET, OnnxFile, Several, plugin_map, unclaimed_folder


@click.command()
@click.argument("reference", type=OnnxFile())
@click.argument("candidates", nargs=-1, type=OnnxFile())
@click.option(
    "--captured",
    "captured",
    cls=Several,
    metavar="FILE[#RUNNER[#I]]",
    help="A candidate captured on another machine (docs/captured.md): Polygraphy --save-outputs JSON (#RUNNER: which "
    "runner, by name or index, of a file holding several; #I: only its iteration I, on the kit's feed I), trtexec "
    "--exportOutput JSON, trtexec's debug tensors (its folder, or tensor_summary.json), KServe v2 response JSON or a "
    "folder of .npy, in the folder of the kit it was made from "
    "(several values, or repeat it).",
)
@click.option(
    "--captured-unmarked",
    "unmarked",
    cls=Several,
    metavar="FILE[#RUNNER]",
    help="An outputs-only capture of the engine of the --captured of the same position (the first goes with the "
    "first --captured): its outputs and the marked capture's must agree, or marking every tensor changed the engine "
    "(docs/captured.md#marking-can-hide-the-bug).",
)
@click.option(
    "--layer-info",
    "layer_info",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="The engine's layer information (trtexec --exportLayerInfo with --profilingVerbosity=detailed): names the "
    "--captured tensors TensorRT named by their ONNX tensors [default: layer_info.json in the kit's folder].",
)
@INPUTS
@click.option(
    "--samples", type=click.IntRange(min=1), help="Number of samples [default: 1 generated, or every row of --inputs]."
)
@click.option(
    "--dim",
    "dims",
    cls=Several,
    metavar="NAME=VALUE",
    help="Value of a dynamic dimension for generated inputs (several values, or repeat it) [default: 1]; "
    "NAME=V1,V2,... sweeps it: the stage runs at every combination of the values given.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of generated inputs.")
@click.option(
    "--backend",
    default="onnxruntime",
    show_default=True,
    type=click.Choice(["onnxruntime", "tensorrt", "tensorrt-rtx"]),
    help="Backend running the candidates.",
)
@click.option(
    "--precision",
    "precisions",
    cls=Several,
    type=click.Choice(["fp16", "bf16", "int8", "fp8", "tf32"]),
    help="TensorRT <= 10 builder flag (several values, or repeat it); with no CANDIDATE the reference itself is built.",
)
@click.option(
    "--calibration-cache",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="A TensorRT <= 10 INT8 calibration cache: its ranges judged against the reference's values (with no "
    "CANDIDATE, against the reference run as the candidate); with --backend tensorrt --precision int8 the build "
    "reads it too.",
)
@click.option(
    "--check",
    "checks",
    cls=Several,
    metavar="METRIC<=X|METRIC>=X",
    help="Checks for every tensor, e.g. 'rel_l2<=0.01' 'cosine>=0.999' [default: by the candidate's precision].",
)
@click.option(
    "--fail-on-lint",
    "fail_on_lint",
    cls=Several,
    metavar="SEVERITY|KIND",
    help="Fail on lint findings of these severities (high, medium, info) or kinds [default: none].",
)
@click.option(
    "--memory-budget", type=float, metavar="MB", help="Bound on intermediates held in memory [default: 2048]."
)
@click.option("--root-causes", type=click.IntRange(min=1), help="How many suspects to report [default: 5].")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Output folder [default: reports/layerwise-<reference name>].",
)
@click.option(
    "--reduce",
    "reduce_to",
    is_flag=True,
    help="Where a candidate diverges: cut the smallest subgraph that still fails and write a bug-report bundle into "
    "OUT/reduce-<candidate> (docs/reduce.md).",
)
@PLUGIN
@QUIET
def layerwise(
    reference: Path,
    candidates: tuple[Path, ...],
    captured: tuple[str, ...],
    unmarked: tuple[str, ...],
    layer_info: Path | None,
    inputs_file: str | None,
    samples: int | None,
    dims: tuple[str, ...],
    seed: int,
    backend: str,
    precisions: tuple[str, ...],
    calibration_cache: Path | None,
    checks: tuple[str, ...],
    fail_on_lint: tuple[str, ...],
    memory_budget: float | None,
    root_causes: int | None,
    out_dir: Path | None,
    reduce_to: bool,
    plugins: tuple[str, ...],
    quiet: bool,
) -> None:
    """Compare every intermediate tensor of REFERENCE with each CANDIDATE, without a suite file.

    Writes the suite it ran (suite.yaml) beside results.json and report.html, so the run
    can be repeated and extended with `trtverify run`.
    """
    from trtverify.cli.run import execute
    from trtverify.config.loader import load_suite
    from trtverify.runner import RunOptions
    from trtverify.suitegen.adhoc import layerwise_suite
    from trtverify.toolout.captures import split_selector
    from trtverify.util.errors import UsageError
    from trtverify.util.fsutil import writable_folder
    from trtverify.util.words import count

    if len(unmarked) > len(captured):
        raise UsageError(f"--captured-unmarked given {count(len(unmarked), 'time')} for {len(captured)} --captured: "
                         "each goes with the --captured of the same position")  # fmt: skip

    def _unmarked(spec: str) -> tuple[Path, str | None]:
        file, runner, iteration = split_selector(spec)
        if iteration is not None:
            raise UsageError(f"--captured-unmarked {spec}: its outputs are compared on every feed; give FILE or "
                             "FILE#RUNNER")  # fmt: skip
        return file, runner

    out = out_dir or Path("reports") / f"layerwise-{reference.stem}"
    if out_dir is None:  # the default folder: never over another suite's results
        unclaimed_folder(out, out / "suite.yaml", chosen="the default folder")
    out = writable_folder(out)
    path = layerwise_suite(
        out,
        reference,
        list(candidates),
        inputs_file=resolve_inputs(inputs_file, reference, out),
        samples=samples,
        dims=dims,
        seed=seed,
        backend=backend,
        precisions=list(precisions),
        checks=list(checks),
        fail_on_lint=list(fail_on_lint),
        memory_budget=memory_budget,
        root_causes=root_causes,
        plugins=plugin_map(plugins),
        calibration_cache=calibration_cache,
        captured=[split_selector(c) for c in captured],
        layer_info=layer_info,
        unmarked=[_unmarked(u) for u in unmarked],
    )
    try:
        execute(load_suite(path), out, RunOptions(stages=("layerwise",)), quiet=quiet)
    except SystemExit as done:
        if not reduce_to or done.code != 1:
            raise
        from trtverify.cli.reduce import reduce_each

        reduce_each(out / "results.json", quiet)
        raise
