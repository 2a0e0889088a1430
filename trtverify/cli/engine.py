"""Commands `trtverify engine audit` and `trtverify engine diff` (registered on the main group in cli/main.py)."""

from __future__ import annotations

from pathlib import Path

import click

from trtverify.cli.options import Several
from trtverify.util.words import count

EXPORTS = click.Path(path_type=Path, exists=True)


@click.group()
def engine() -> None:
    """What TensorRT built and where the time goes, from trtexec's --exportLayerInfo / --exportProfile files."""


@engine.command()
@click.argument("paths", nargs=-1, required=True, type=EXPORTS)
@click.option("--json", "as_json", is_flag=True, help="Print the audit as JSON (stable keys, docs/engine.md).")
def audit(paths: tuple[Path, ...], as_json: bool) -> None:
    """Audit one engine: PATHS are its export files (and trtexec's console log), or a folder holding them."""
    from trtverify.engine.audit import audit as run_audit
    from trtverify.util.fsutil import to_json

    a = run_audit(list(paths))
    if as_json:
        click.echo(to_json(a.dump()))
        return
    total = f"{a.total_ms:.3f} ms" if a.total_ms is not None else "no profile"
    mix = ", ".join(f"{k} {v}" for k, v in a.precisions.items())
    click.echo(
        f"{count(a.layers, 'engine layer')} ({mix}); {count(a.reformat_layers, 'reformat layer')}; total {total}"
    )
    if a.io_tensors:
        shown = [
            f"{t.name} ({', '.join(str(x) for x in (t.mode, t.dtype, t.dimensions) if x is not None)})"
            if t.mode or t.dtype or t.dimensions
            else t.name
            for t in a.io_tensors
        ]
        click.echo(f"I/O tensors ({a.inspector} inspector): " + "; ".join(shown))
    perf = a.performance
    if perf is not None:
        lat = perf.stats.get("latency", {})
        gpu = perf.stats.get("gpu_compute", {})
        parts = [f"throughput {perf.throughput_qps:g} qps" if perf.throughput_qps is not None else None]
        parts += [f"latency mean {lat['mean']:g} ms" if "mean" in lat else None]
        parts += [f"p99 {lat['p99']:g} ms" if "p99" in lat else None]
        parts += [f"GPU compute mean {gpu['mean']:g} ms" if "mean" in gpu else None]
        click.echo("performance: " + ", ".join(p for p in parts if p))
    for f in a.findings:
        click.echo(f"  [{f.severity}] {f.kind}: {f.message}")


@engine.command()
@click.argument("a_paths", nargs=-1, required=True, type=EXPORTS)
@click.option(
    "--vs", "b_paths", cls=Several, required=True, type=EXPORTS, help="Build B: its export files or folder (several)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON (stable keys, docs/engine.md).")
def diff(a_paths: tuple[Path, ...], b_paths: tuple[Path, ...], as_json: bool) -> None:
    """Compare two builds: layers grouped by the ONNX nodes they implement, the groups that explain the change."""
    from trtverify.engine.diff import diff as run_diff
    from trtverify.util.fsutil import to_json

    d = run_diff(list(a_paths), list(b_paths))
    if as_json:
        click.echo(to_json(d.dump()))
        return
    ta, tb = (f"{t:.3f} ms" if t is not None else "no timing" for t in (d.total_a_ms, d.total_b_ms))
    click.echo(f"A {ta}, B {tb}, {count(len(d.rows), 'layer group')}")
    for f in d.findings:
        click.echo(f"  [{f.severity}] {f.kind}: {f.message}")
