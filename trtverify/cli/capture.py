"""Command `trtverify capture` (registered on the main group in cli/main.py): a kit for capturing an engine's tensors
on another machine (docs/captured.md)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click

from trtverify.cli.inputsarg import INPUTS, resolve_inputs
from trtverify.cli.options import OnnxFile, Several
from trtverify.util.words import count


@click.command()
@click.argument("reference", type=OnnxFile())
@INPUTS
@click.option(
    "--samples", type=click.IntRange(min=1), help="Number of feeds [default: 1 generated, or every row of --inputs]."
)
@click.option("--dim", "dims", cls=Several, metavar="NAME=VALUE", help="Value of a dynamic dimension [default: 1].")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of generated inputs.")
@click.option(
    "--suite",
    "suite_file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="A suite with stage e2e: also write its validation rows in batches (KIT/e2e/), for a `captured:` candidate "
    "of stage e2e.",
)
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="The kit's folder.")  # fmt: skip
def capture(
    reference: Path,
    inputs_file: Path | None,
    samples: int | None,
    dims: tuple[str, ...],
    seed: int,
    suite_file: Path | None,
    out_dir: Path,
) -> None:
    """Write a kit to capture REFERENCE's engine's tensors on another machine (Polygraphy, trtexec, its runner script).

    The kit holds the feeds (Polygraphy --load-inputs JSON, trtexec raw files, .npz), their digest
    (manifest.json) and a README with the commands; compare what they write with
    `trtverify layerwise REFERENCE --captured FILE`.
    """
    from trtverify.config.loader import load_suite
    from trtverify.data.inputs import build_samples, check_samples
    from trtverify.data.kit import write_kit
    from trtverify.graph.onnxinfo import graph_io, load_io
    from trtverify.suitegen.adhoc import layerwise_suite
    from trtverify.toolout.kit import feed_digest
    from trtverify.util.errors import UsageError
    from trtverify.util.fsutil import writable_folder

    # the suite first: nothing is written for a suite that cannot give validation batches
    # (check_files=False: the suite may already name the capture this kit is for, not made yet)
    loaded_suite = load_suite(suite_file, check_files=False) if suite_file is not None else None
    if loaded_suite is not None and loaded_suite.suite.stages.e2e is None:
        raise UsageError(f"{suite_file}: has no stage e2e: --suite adds the validation batches of its e2e stage")
    out = writable_folder(out_dir)
    with tempfile.TemporaryDirectory(prefix="trtverify-capture-") as tmp:
        inputs_path = resolve_inputs(inputs_file, reference, Path(tmp))
        # the feeds exactly as `trtverify layerwise` makes them from the same arguments
        suite = layerwise_suite(Path(tmp), reference, [reference], inputs_file=inputs_path, samples=samples,
                                dims=dims, seed=seed, backend="onnxruntime", precisions=[], checks=[],
                                memory_budget=None, root_causes=None)  # fmt: skip
        loaded = load_suite(suite)
        inputs, outputs = graph_io(load_io(reference))
        feeds = build_samples(loaded, inputs)
        check_samples(feeds, inputs, str(inputs_path) if inputs_path is not None else "generated inputs")
        ranks = {m.name: (len(m.shape) if m.shape is not None else None) for m in inputs}
        dynamic = any(not (isinstance(d, int) and d > 0) for m in inputs for d in (m.shape or ()))
        declared = {m.name: (tuple(m.shape) if m.shape is not None else None) for m in inputs}
        outs = [tuple(m.shape) if m.shape is not None else None for m in outputs]
        _keep_captures(out, [feed_digest(f) for f in feeds])
        manifest = write_kit(out, reference, feeds, ranks, dynamic, declared, outs)
        # the kit's .npz must give back the same feeds when `layerwise --captured` reads it
        again = layerwise_suite(Path(tmp), reference, [reference], inputs_file=out / "inputs.npz", samples=None,
                                dims=(), seed=0, backend="onnxruntime", precisions=[], checks=[], memory_budget=None,
                                root_causes=None, batch_size=int(manifest["batch_size"]) if manifest["batch_size"] != 1
                                else None)  # fmt: skip
        back = [feed_digest(f) for f in build_samples(load_suite(again), inputs)]
        if back != manifest["sample_digests"]:
            (out / "manifest.json").unlink()  # no capture is compared against a kit that cannot give its feeds back
            raise UsageError(
                f"{out / 'inputs.npz'}: these feeds do not read back as the same feeds (batched feeds of several rows "
                "each); give --inputs with one row per feed"
            )
    if loaded_suite is not None:
        from trtverify.stages.e2e.kitbatches import add_batches

        e2e = add_batches(out, loaded_suite, reference)
        click.echo(f"validation batches: {out / 'e2e'} ({count(e2e['rows'], 'row')} in "
                   f"{count(len(e2e['batches']), 'batch')}: {e2e['batching']})")  # fmt: skip
    extra = manifest["consistency"]["feeds"]  # type: ignore[index]
    click.echo(f"kit: {out} ({count(manifest['samples'], 'feed')} and {count(len(extra), 'consistency feed')}, "
               f"digest {str(manifest['digest'])[:12]}); commands in {out / 'README.md'}")  # fmt: skip


def _keep_captures(out: Path, digests: list[str]) -> None:
    """A kit folder already holding captures is not written over with other feeds: its captures would be left
    without the kit they were made from (the same feeds again, as with --suite added later, are fine)."""
    import json

    from trtverify.toolout.kit import MANIFEST, feeds_digest
    from trtverify.util.errors import UsageError

    try:
        old = json.loads((out / MANIFEST).read_text(encoding="utf-8")).get("digest")
    except (OSError, ValueError, AttributeError):
        return
    held = [p for d in (out / "captured", out / "e2e" / "captured") if d.is_dir() for p in d.iterdir()]
    if held and old != feeds_digest(digests):
        raise UsageError(
            f"{out}: a kit whose captures ({held[0]}{', ...' if len(held) > 1 else ''}) were made from other feeds "
            f"(digest {str(old)[:12]}) than these ({feeds_digest(digests)[:12]}): writing this kit over it would "
            "leave them without their kit; give another --out"
        )
