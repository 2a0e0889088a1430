"""Commands `trtverify repair` and `trtverify convert` (registered on the main command group in cli/main.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import click

from trtverify.cli.options import PLUGIN, QUIET, OnnxFile, Several, plugin_map, unclaimed_folder
from trtverify.util.errors import UsageError
from trtverify.util.words import count


def tool_option(help_text: str) -> Any:
    """`--tool trtverify|modelopt`: who lowers the reference (repair and convert say what it means for each)."""
    return click.option(
        "--tool", type=click.Choice(["trtverify", "modelopt"]), default="trtverify", show_default=True, help=help_text
    )


INPUT_HELP = "Inputs: .npz, keys = input names, first axis = rows [default: one generated sample]."


def _rows(reference: Path, path: Path) -> list:
    """Rows of an .npz (keys = input names), one feed each, read like a suite's inputs file."""

    from trtverify.data.inputs import open_array_file, read_member, without_batch_axis
    from trtverify.graph.onnxinfo import graph_io, load_io

    with open_array_file(path) as data:  # a damaged or foreign file: exit 2 naming it
        arrays = {k: read_member(data, k, path) for k in data.files}
    rows = min((len(a) for a in arrays.values()), default=0)
    if not rows:
        raise UsageError(f"{path}: no rows (keys = the input names of {reference.name}, first axis = rows)")
    unbatched = without_batch_axis(arrays, {m.name: m for m in graph_io(load_io(reference))[0]})
    return [{k: a[i] if k in unbatched else a[i : i + 1] for k, a in arrays.items()} for i in range(rows)]


# what `repair` and `lower` take in --precision (the repair stage's precision)
LOWERED = ["fp16", "bf16", "int8", "fp8", "int4"]


@click.command()
@click.argument("reference", type=OnnxFile())
@click.option(
    "--precision",
    required=True,
    type=click.Choice(LOWERED),
    help="What the candidate computes in: fp16 and int8 are made here without --candidate; bf16, fp8 and int4 "
    "come from ModelOpt as --candidate.",
)
@click.option("--inputs", "inputs_file", type=click.Path(path_type=Path, dir_okay=False, exists=True), help=INPUT_HELP)
@click.option("--samples", type=click.IntRange(min=1), help="Use the first N samples [default: all rows].")
@click.option(
    "--dim", "dims", cls=Several, metavar="NAME=VALUE", help="Dynamic dimensions of generated inputs (several values)."
)
@click.option(
    "--calibration",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="INT8 calibration data (.npz like --inputs) [default: the inputs].",
)
@click.option(
    "--candidate",
    type=OnnxFile(),
    help="The lowered model to repair: Q/DQ, FP16/BF16 or both (e.g. ModelOpt's INT8 with its FP16 rest) "
    "[default: the reference lowered here: FP16, or INT8 symmetric and per-channel].",
)
@click.option(
    "--check",
    "checks",
    cls=Several,
    metavar="METRIC<=X|METRIC>=X",
    help="Replaces the output checks (several values, or repeat it) [default: the precision's layerwise defaults].",
)
@click.option(
    "--tensors",
    type=click.Choice(["outputs", "all"]),
    default="outputs",
    show_default=True,
    help="Apply the checks to the model outputs, or to every tensor.",
)
@click.option("--max-evaluations", type=click.IntRange(min=1), default=50, show_default=True)
@tool_option(
    "Who lowers REFERENCE when there is no --candidate: trtverify (fp16, int8) or ModelOpt (AutoCast fp16/bf16, "
    "int8/fp8/int4 Q/DQ with its FP16 rest; the [modelopt] extra), calibrated on --calibration or --inputs."
)
@click.option(
    "--method",
    type=click.Choice(["auto", "minmax", "entropy", "percentile", "mse"]),
    default="auto",
    show_default=True,
    help="INT8 made here (no --candidate): the calibration method, as convert's; --tool modelopt takes minmax (its "
    "max) or entropy (auto: its default).",
)
@click.option(
    "--holdout",
    type=click.FloatRange(0, 1, max_open=True),
    default=0.25,
    show_default=True,
    help="Share of the input rows the search does not use; the repaired model is verified on them (0: none).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Output folder [default: reports/repair-<reference name>-<precision>].",
)
@click.option(
    "--sensitivity",
    is_flag=True,
    help="After the search, the sensitivity table: each suspect node and op type kept alone in FP32 and lowered "
    "alone, ranked by its share of the output error; its exclusion list written for ModelOpt, trtexec and trtverify.",
)
@click.option("--sensitivity-suspects", type=click.IntRange(min=1), default=10, show_default=True,
              help="--sensitivity: at most N suspect nodes tried.")  # fmt: skip
@click.option("--sensitivity-trials", type=click.IntRange(min=1), default=40, show_default=True,
              help="--sensitivity: at most N evaluations.")  # fmt: skip
@click.option("--sensitivity-seconds", type=click.FloatRange(min=0, min_open=True), default=300, show_default=True,
              metavar="S", help="--sensitivity: stop trying after S seconds.")  # fmt: skip
@click.option(
    "--suspects-from",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    metavar="RESULTS.json",
    help="--sensitivity: try first the first divergence and root causes of this layerwise run's results.json.",
)
@PLUGIN
@QUIET
def repair(
    reference: Path,
    precision: str,
    inputs_file: Path | None,
    samples: int | None,
    dims: tuple[str, ...],
    calibration: Path | None,
    candidate: Path | None,
    checks: tuple[str, ...],
    tensors: str,
    max_evaluations: int,
    tool: str,
    method: str,
    holdout: float,
    out_dir: Path | None,
    sensitivity: bool,
    sensitivity_suspects: int,
    sensitivity_trials: int,
    sensitivity_seconds: float,
    suspects_from: Path | None,
    plugins: tuple[str, ...],
    quiet: bool,
) -> None:
    """Find the smallest set of nodes to keep in FP32 so REFERENCE lowered to --precision passes, and verify it.

    Writes the repaired ONNX model and repair.json (the keep-list, before and after, its check on held-out
    rows, its cost, and the keep-list for ONNX Runtime, Polygraphy, trtexec and ModelOpt; with --sensitivity, the
    sensitivity table and its exclusion lists in repair-PRECISION/sensitivity/). Exit 0 when the
    repaired model passes on the search's rows and the held-out ones, 1 when not (the best keep-list is
    reported, with why the search ended there), 2 for usage errors.
    """
    from trtverify.cli.run import execute
    from trtverify.config.loader import load_suite
    from trtverify.runner import RunOptions
    from trtverify.suitegen.adhoc import repair_suite

    if candidate is not None:
        from trtverify.lint.linter import precision_parts

        if precision_parts(candidate) == ["fp32"]:
            raise UsageError(
                f"--candidate {candidate}: it computes in FP32 (no Q/DQ, no FP16/BF16 types): nothing was lowered to "
                "repair; pass the lowered model (e.g. ModelOpt's output)"
            )
    if method != "auto" and precision not in ("int8", "fp8"):
        raise UsageError(f"--method {method}: calibration methods are for --precision int8")
    if method != "auto" and candidate is not None:
        raise UsageError(f"--method {method}: --candidate is calibrated already; the method is for the INT8 made here")
    if method == "mse":
        from trtverify.convert.int8 import check_method

        check_method(method)  # exit 2 before anything runs
    out = out_dir or Path("reports") / f"repair-{reference.stem}-{precision}"
    if out_dir is None:  # the default folder: never over another suite's results
        unclaimed_folder(out, out / "suite.yaml", chosen="the default folder")
    if tool == "modelopt":
        if candidate is not None:
            raise UsageError("--tool modelopt makes the candidate: give it or --candidate, not both")
        from trtverify.convert.modelopt import make

        rows = _rows(reference, calibration or inputs_file) if (calibration or inputs_file) else []
        candidate = make(reference, precision, Path(out) / "candidates" / f"{reference.stem}_{precision}_modelopt.onnx",
                         rows, method=method)  # fmt: skip
        if not quiet:
            click.echo(f"ModelOpt made the candidate: {candidate}", err=True)
    if candidate is None and precision in ("bf16", "fp8", "int4"):
        raise UsageError(
            f"--precision {precision}: trtverify lowers to fp16 and int8 itself; pass the {precision} model ModelOpt "
            "made as --candidate, or --tool modelopt (docs/making-candidates.md)"
        )
    table: dict[str, Any] = {"suspects": sensitivity_suspects, "max_trials": sensitivity_trials,
                             "seconds": sensitivity_seconds}  # fmt: skip
    if suspects_from is not None:
        if not sensitivity:
            raise UsageError("--suspects-from goes with --sensitivity (it names the table's first suspects)")
        from trtverify.repair.sensitivity import layerwise_suspects

        layerwise_suspects(suspects_from)  # a file that is not a layerwise run's results: exit 2 before anything runs
        table["suspects_from"] = str(suspects_from.resolve())
    path = repair_suite(
        out,
        reference,
        precision,
        inputs_file=inputs_file,
        samples=samples,
        dims=dims,
        calibration=calibration,
        candidate=candidate,
        checks=list(checks),
        tensors=tensors,
        max_evaluations=max_evaluations,
        holdout=holdout,
        plugins=plugin_map(plugins),
        method="auto" if tool == "modelopt" else method,
        sensitivity=table if sensitivity else None,
    )
    execute(load_suite(path), out, RunOptions(stages=("repair",)), quiet=quiet)


@click.command()
@click.argument("reference", type=OnnxFile())
@click.option(
    "--precision",
    required=True,
    type=click.Choice(LOWERED),
    help="What to lower to (bf16, fp8, int4: --tool modelopt).",
)
@click.option("--keep", cls=Several, metavar="NODE", help="ONNX nodes kept in FP32 (several values, or repeat it).")
@tool_option(
    "trtverify (fp16 islands, TensorRT-compatible int8 Q/DQ) or ModelOpt with its defaults (the [modelopt] "
    "extra; with --keep, AutoCast keeps those nodes FP32 and quantization leaves them without Q/DQ)."
)
@click.option(
    "--calibration",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="INT8 calibration data (.npz, keys = input names, first axis = rows); required for int8.",
)
@click.option(
    "--keep-outlier-rows",
    is_flag=True,
    help="Calibrate on every row, even those that set a tensor's range far beyond the others' (left out by default).",
)
@click.option(
    "--method",
    type=click.Choice(["auto", "minmax", "entropy", "percentile", "mse"]),
    default="auto",
    show_default=True,
    help="INT8 calibration: auto calibrates with minmax, entropy and percentile on 3/4 of the rows and keeps the one "
    "with the smallest error on the rest (a detector's: before its NMS), stopping a method that would take over 10x "
    "minmax's time; --tool modelopt takes minmax (its max) or entropy (auto: its default); mse: neither tool has it.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=1800,
    show_default=True,
    metavar="S",
    help="--tool modelopt: stop ModelOpt after S seconds (its log is shown as it runs).",
)
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path, dir_okay=False))
def convert(
    reference: Path,
    precision: str,
    keep: tuple[str, ...],
    tool: str,
    calibration: Path | None,
    keep_outlier_rows: bool,
    method: str,
    timeout: float,
    output: Path,
) -> None:
    """Lower REFERENCE to FP16 (FP32 islands for --keep) or to TensorRT-compatible INT8 Q/DQ (symmetric,
    per-channel; --keep nodes without Q/DQ); or with ModelOpt (--tool modelopt), the TensorRT 11 way."""
    import onnx

    from trtverify.convert.calibdata import check_rows
    from trtverify.convert.fp16 import to_fp16
    from trtverify.convert.int8 import keep_fp32, record_calibration
    from trtverify.convert.output import save_checked
    from trtverify.graph.onnxinfo import check_graph

    check_graph(reference)  # a cycle, external data missing: exit 2 naming the file, before any lowering
    if tool == "modelopt":
        from trtverify.convert.modelopt import make

        rows = _rows(reference, calibration) if calibration else []
        if rows and precision in ("int8", "fp8", "int4"):  # the same calibration-data lint as trtverify's own INT8
            check = check_rows(reference, rows, keep_outlier_rows)
            for line in check.warnings():
                click.echo(f"warning: {line}", err=True)
            rows = [rows[i] for i in check.kept]

        def progress(line: str) -> None:  # ModelOpt's log as it comes: a calibration shows nothing else for minutes
            if not line.startswith("INFO:modelopt"):  # the same lines again, in Python logging's default format
                click.echo(f"  modelopt: {line[:200]}", err=True)

        make(reference, precision, output, rows, keep, method=method, timeout_s=timeout, progress=progress)
        if precision in ("int8", "fp8") and method == "auto":
            click.echo(f"{precision} calibration method: ModelOpt's default (entropy); auto compares methods with "
                       "--tool trtverify only", err=True)  # fmt: skip
        onnx.checker.check_model(str(output), full_check=True)
        click.echo(f"written: {output} (ModelOpt)")
        return
    if precision not in ("fp16", "int8"):
        raise UsageError(f"--precision {precision}: trtverify lowers to fp16 and int8; use --tool modelopt")
    if precision == "fp16" and method != "auto":
        raise UsageError(f"--method {method}: calibration methods are for --precision int8")
    model = onnx.load(str(reference))
    if precision == "fp16":
        try:
            made = to_fp16(model, keep)
        except ValueError as exc:
            raise UsageError(f"{reference}: {exc}") from exc
    else:
        if calibration is None:
            raise UsageError("--precision int8 needs --calibration X.npz (rows of real inputs)")
        feeds = _rows(reference, calibration)
        check = check_rows(reference, feeds, keep_outlier_rows)
        for line in check.warnings():
            click.echo(f"warning: {line}", err=True)
        output.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{output.name}.", dir=output.parent) as tmp:
            quantized = Path(tmp) / output.name  # never at -o until it is checked
            record = _calibrate(reference, quantized, [feeds[i] for i in check.kept], method)
            try:
                made = keep_fp32(onnx.load(str(quantized)), model, keep) if keep else onnx.load(str(quantized))
            except ValueError as exc:
                raise UsageError(f"{reference}: {exc}") from exc
        record_calibration(made, record)
    for line in save_checked(made, output, reference, precision):  # written only once it loads
        click.echo(f"warning: {line}", err=True)
    click.echo(f"written: {output}")


def _calibrate(reference: Path, output: Path, feeds: list, method: str) -> dict[str, Any]:
    """INT8 Q/DQ of `reference` with `method`, or with the method `auto` finds best (its figures on stderr); what
    was chosen and why, for the model's metadata."""
    from trtverify.convert.int8 import check_method, quantize

    if method != "auto":
        check_method(method)  # mse: exit 2 before anything runs
        quantize(reference, output, feeds, method=method, progress=lambda line: click.echo(f"int8 {line}", err=True))
        return {"method": method, "calibration_rows": len(feeds)}
    from trtverify.repair.calibrate import choose

    def progress(line: str) -> None:
        click.echo(f"int8 auto: {line}", err=True)

    choice = choose(reference, output, feeds, progress=progress)
    if choice.figures:
        figures = ", ".join(f"{m} {v:.4g}" for m, v in choice.figures.items())
        figures += "".join(f", {m} not compared (over budget)" for m in choice.skipped)
        click.echo(
            f"int8 calibration method: {choice.method} (worst rel_l2 over {count(len(choice.judged), 'judged tensor')} "
            f"on {count(choice.held_out, 'held-out row')}, calibrated on {choice.fit_rows}: {figures}); final model "
            "calibrated "
            "on all rows",
            err=True,
        )
    else:
        click.echo(f"int8 calibration method: {choice.method} ({choice.note})", err=True)
    return choice.record()
