"""Command `trtverify reduce` (registered on the main group in cli/main.py): from a layerwise divergence to a bug-report
bundle (docs/reduce.md); `trtverify layerwise --reduce` calls `reduce_results` after its run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from trtverify.cli.options import QUIET
from trtverify.util.errors import UsageError
from trtverify.util.words import count


@click.command()
@click.argument("source", type=click.Path(path_type=Path, exists=True))
@click.option("--candidate", help="The candidate to reduce [default: the one whose layerwise run diverged].")
@click.option(
    "--samples", type=click.IntRange(min=1), help="Try the cuts on the first N samples [default: those of the run]."
)
@click.option(
    "--max-fraction",
    type=click.FloatRange(0, 1, min_open=True),
    default=0.5,
    show_default=True,
    help="Refuse where the failure shows only from the graph inputs and the cut holds more of the model than this.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="The bundle's folder [default: reduce-<candidate> beside results.json; for a suite, "
    "reports/<suite name>/reduce-<candidate>].",
)
@QUIET
def reduce(
    source: Path, candidate: str | None, samples: int | None, max_fraction: float, out_dir: Path | None, quiet: bool
) -> None:
    """Cut the smallest subgraph that still shows a layerwise divergence, and write a bug-report bundle.

    SOURCE is a layerwise run's results.json (or its folder), or a suite: its layerwise stage runs first (with
    --candidate, on that candidate alone), into BUNDLE/run/. The bundle holds both subgraphs, inputs, reference
    outputs, the trtexec and Polygraphy commands that reproduce the divergence, the versions and REPORT.md. Exit 0:
    bundle written; 1: no subgraph smaller than the model fails (the reason is printed); 2: bad input.
    """
    import sys

    if source.suffix in (".yaml", ".yml"):
        results, out_dir = _run_layerwise(source, candidate, out_dir, quiet)
    else:
        results = source / "results.json" if source.is_dir() else source
    sys.exit(reduce_results(results, candidate, out_dir, samples, max_fraction, quiet))


def _run_layerwise(suite: Path, candidate: str | None, out_dir: Path | None, quiet: bool) -> tuple[Path, Path]:
    """The suite's layerwise stage (with --candidate: on that candidate alone, whether or not the suite's stage
    lists it) into BUNDLE/run/; (its results.json, the bundle's folder)."""
    import dataclasses

    from trtverify.cli.run import run_and_record, suite_out
    from trtverify.config.loader import load_suite
    from trtverify.config.stages import LayerwiseStage
    from trtverify.runner import RunOptions
    from trtverify.util.fsutil import folder_lock, writable_folder

    loaded = load_suite(suite)
    stages = loaded.suite.stages
    if candidate is not None:
        if candidate not in loaded.suite.models.candidates:
            names = ", ".join(loaded.suite.models.candidates) or "none"
            raise UsageError(f"{suite}: no candidate '{candidate}' in models.candidates (it has: {names})")
        stage = (stages.layerwise or LayerwiseStage()).model_copy(update={"candidates": [candidate]})
        stages = stages.model_copy(update={"layerwise": stage})
        loaded = dataclasses.replace(loaded, suite=loaded.suite.model_copy(update={"stages": stages}))
    elif stages.layerwise is None:
        raise UsageError(f"{suite}: has no stage layerwise: give --candidate to run it on that candidate")
    out = out_dir or suite_out(loaded) / f"reduce-{candidate or 'layerwise'}"
    run = writable_folder(out / "run")
    with folder_lock(run):
        if not quiet:
            click.echo(f"reduce: stage layerwise of {suite} into {run}", err=True)
        run_and_record(loaded, run, RunOptions(stages=("layerwise",)))
    return run / "results.json", out


def reduce_results(
    results: Path,
    candidate: str | None,
    out_dir: Path | None,
    samples: int | None = None,
    max_fraction: float = 0.5,
    quiet: bool = False,
    exit_refused: int = 1,
) -> int:
    """Reduce `candidate`'s divergence in the layerwise results at `results` into a bundle; the exit code (0: written,
    `exit_refused`: refused, with the reason printed)."""
    from trtverify.reduce.bundle import write_bundle
    from trtverify.reduce.search import Refused, reduce
    from trtverify.util.fsutil import writable_folder

    t0 = time.perf_counter()
    loaded, record, ref, cand, feeds, checks_for, options = _inputs(results, candidate, samples)
    out = out_dir or results.parent / f"reduce-{record.name}"
    made = not out.exists()
    out = writable_folder(out)  # before any work: exit 2 where it cannot be written

    def progress(line: str) -> None:
        if not quiet:
            click.echo(f"  reduce {record.name}: {line}", err=True)

    try:
        r = reduce(ref, cand, record, feeds, checks_for, options, max_fraction, progress)
    except Refused as exc:
        click.echo(f"REFUSED reduce {record.name}: {exc}")
        if made and not any(out.iterdir()):  # no bundle: no empty folder left as if there were one
            out.rmdir()
        return exit_refused
    s = write_bundle(r, out, record.name, (ref.name, cand.name))
    m = s["metrics"]
    rn, cn = s["reference_nodes"], s["candidate_nodes"]
    click.echo(
        f"reduce {record.name}: {s['target']} fails on its own (rel_l2 {m.get('rel_l2', float('nan')):.4g}, cosine "
        f"{m.get('cosine', float('nan')):.4g}; fails {', '.join(s['failed'])}) in a subgraph of {rn['subgraph']} of "
        f"the reference's {count(rn['model'], 'node')} (candidate: {cn['subgraph']} of {cn['model']}, "
        f"{count(cn['adapters'], 'cast')} at the cut) ({time.perf_counter() - t0:.2f} s)"
    )
    if rn["subgraph"] * 10 > rn["model"]:
        click.echo(
            f"  the subgraph holds more than a tenth of the model: {rn['subgraph']} of {count(rn['model'], 'node')}"
        )
    if not quiet:
        click.echo(f"bundle: {out} (REPORT.md, COMMANDS.sh)", err=True)
    return 0


def reduce_each(results: Path, quiet: bool) -> None:
    """`layerwise --reduce`: a bundle for each candidate that diverged (beside results.json), or why not."""
    from trtverify.results.io import load_results

    stage = next((s for s in load_results(results).stages if s.name == "layerwise" and s.candidates), None)
    for c in stage.candidates if stage is not None else []:
        if c.first_divergence is None:
            if not c.passed:
                click.echo(f"not reduced {c.name}: no tensor diverged (what failed is not a tensor's checks)")
            continue
        try:
            reduce_results(results, c.name, None, quiet=quiet)
        except UsageError as exc:
            click.echo(f"not reduced {c.name}: {exc}")


def _inputs(results: Path, candidate: str | None, samples: int | None) -> tuple[Any, ...]:
    """The suite, the candidate's layerwise record, the models, the samples, its checks and ONNX Runtime's options."""
    from trtverify.config.loader import load_suite
    from trtverify.data.inputs import build_samples
    from trtverify.results.io import load_results
    from trtverify.stages.layerwise.reference import as_written
    from trtverify.stages.layerwise.stage import checks_of

    res = load_results(results)
    stage = next((s for s in res.stages if s.name == "layerwise" and s.candidates), None)
    if stage is None:
        raise UsageError(f"{results}: holds no layerwise result with candidates: run the layerwise stage first")
    diverged = [c for c in stage.candidates if c.first_divergence is not None]
    if candidate is None:
        if len(diverged) != 1:
            names = ", ".join(c.name for c in diverged) or "none"
            raise UsageError(f"{results}: {count(len(diverged), 'candidate')} diverged ({names}): give --candidate")
        record = diverged[0]
    else:
        record = next((c for c in stage.candidates if c.name == candidate), None)
        if record is None:
            names = ", ".join(c.name for c in stage.candidates)
            raise UsageError(f"{results}: no layerwise candidate '{candidate}' (it holds: {names})")
        if record.first_divergence is None:
            raise UsageError(f"{results}: candidate '{candidate}' did not diverge: nothing to reduce")
    suite = Path(res.suite.path)
    if not suite.is_file() and (results.parent / "suite.yaml").is_file():  # recorded relative to another folder
        suite = results.parent / "suite.yaml"
    if not suite.is_file():
        raise UsageError(f"{results}: its suite file {res.suite.path} is not there: the inputs come from it")
    loaded = load_suite(suite)
    spec = loaded.suite.models.candidates.get(record.name)
    if spec is None or spec.path is None:
        raise UsageError(f"{suite}: no candidate model file for '{record.name}'")
    if spec.backend != "onnxruntime" or spec.captured is not None:
        raise UsageError(f"candidate '{record.name}' runs on {spec.backend}{' (captured)' if spec.captured else ''}: "
                         "reduce verifies cuts in ONNX Runtime; compare its ONNX model there first")  # fmt: skip
    cfg = loaded.suite.stages.layerwise
    if cfg is None:
        from trtverify.config.stages import LayerwiseStage

        cfg = LayerwiseStage()
    feeds = build_samples(loaded)[: min(record.samples, samples or record.samples)]
    checks_for, _ = checks_of(cfg, record.name, record.precision)
    options = as_written(loaded.suite.backends).onnxruntime
    return loaded, record, Path(loaded.suite.models.reference), Path(spec.path), feeds, checks_for, options
