"""Commands `trtverify engine audit` and `trtverify engine diff` (registered on the main group in cli/main.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from trtverify.cli.options import Several
from trtverify.util.words import count

if TYPE_CHECKING:
    from trtverify.engine.audit import Audit
    from trtverify.engine.exports import EngineLayer

EXPORTS = click.Path(path_type=Path, exists=True)
PLUGIN_HELP = (
    "A plugin layer the exports list by name only: its op_type or layer name (globs * ?; OP also matches "
    "OP_12). Repeatable. Plugin layers are found without it where the layer type or a known plugin name tells."
)


def _unmatched(patterns: tuple[str, ...], *layer_sets: list[EngineLayer]) -> None:
    """Say which --plugin patterns matched no layer (a typo, or a layer the engine does not have)."""
    from trtverify.engine.plugins import matches, pattern_op

    for p in patterns:
        if not any(matches(p, layer) for layers in layer_sets for layer in layers):
            click.echo(f"note: --plugin {pattern_op(p)} matches no engine layer", err=True)


def _print_plugins(a: Audit) -> None:
    if not a.plugins:
        return
    click.echo("plugin layers:")
    for p in a.plugins:
        what = ", ".join(x for x in (p.type if p.type != "unknown" else None, p.plugin) if x)
        head = f"  {p.name} ({what + '; ' if what else ''}found by {p.found_by})"
        if p.avg_ms is not None:
            head += f": {p.avg_ms:.3f} ms" + (f", {p.share:.1%} of the time" if p.share is not None else "")
        if p.next_to and p.next_to_ms is not None and p.share_with_next_to is not None:
            both = (p.avg_ms or 0.0) + p.next_to_ms
            head += f"; {both:.3f} ms, {p.share_with_next_to:.1%} with the reformat/copy layers next to it"
        click.echo(head)
        for n in p.next_to:
            ms = f" {n.avg_ms:.3f} ms" if n.avg_ms is not None else ""
            kind = f" ({n.type})" if n.type != "unknown" else ""
            click.echo(f"    {n.side + ':':7} {n.name}{kind}{ms}")


@click.group()
def engine() -> None:
    """What TensorRT built and where the time goes, from trtexec's --exportLayerInfo / --exportProfile files."""


@engine.command()
@click.argument("paths", nargs=-1, required=True, type=EXPORTS)
@click.option("--plugin", "plugins", multiple=True, metavar="OP", help=PLUGIN_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the audit as JSON (stable keys, docs/engine.md).")
def audit(paths: tuple[Path, ...], plugins: tuple[str, ...], as_json: bool) -> None:
    """Audit one engine: PATHS are its export files (and trtexec's console log), or a folder holding them."""
    from trtverify.engine.audit import audit_layers, engine_layers
    from trtverify.util.fsutil import to_json

    read = engine_layers(list(paths))
    _unmatched(plugins, read[0])
    a = audit_layers(*read, plugins=plugins)
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
    _print_plugins(a)
    for f in a.findings:
        click.echo(f"  [{f.severity}] {f.kind}: {f.message}")


@engine.command()
@click.argument("a_paths", nargs=-1, required=True, type=EXPORTS)
@click.option(
    "--vs", "b_paths", cls=Several, required=True, type=EXPORTS, help="Build B: its export files or folder (several)."
)
@click.option("--plugin", "plugins", multiple=True, metavar="OP", help=PLUGIN_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON (stable keys, docs/engine.md).")
def diff(a_paths: tuple[Path, ...], b_paths: tuple[Path, ...], plugins: tuple[str, ...], as_json: bool) -> None:
    """Compare two builds: layers grouped by the ONNX nodes they implement, the groups that explain the change,
    and the fusions a plugin of one build cut."""
    from trtverify.engine.audit import audit_layers, engine_layers
    from trtverify.engine.diff import diff_read
    from trtverify.util.fsutil import to_json

    a, b = engine_layers(list(a_paths)), engine_layers(list(b_paths))
    _unmatched(plugins, a[0], b[0])
    d = diff_read(a[0], b[0], audit_layers(*a, plugins=plugins), audit_layers(*b, plugins=plugins))
    if as_json:
        click.echo(to_json(d.dump()))
        return
    ta, tb = (f"{t:.3f} ms" if t is not None else "no timing" for t in (d.total_a_ms, d.total_b_ms))
    click.echo(f"A {ta}, B {tb}, {count(len(d.rows), 'layer group')}")
    for f in d.findings:
        click.echo(f"  [{f.severity}] {f.kind}: {f.message}")
