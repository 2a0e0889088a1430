"""The engine audit's layers from trtexec's console output (a `--dumpLayerInfo` listing and a `--dumpProfile`
table, read by trtverify.toolout.tables), for a log given without JSON exports."""

from __future__ import annotations

from trtverify.engine.exports import REFORMAT_OF, EngineLayer, nodes_of
from trtverify.toolout.tables import LayerListing, ProfileTable


def console_layers(listing: LayerListing | None, table: ProfileTable | None) -> list[EngineLayer]:
    """Engine layers from a console log: the listing's layers (type and output precision where it says them) in
    its order, their average ms from the profile table by name; layers only the table names follow it."""
    times = {row.name: row.avg_ms for row in table.rows} if table else {}
    names = [(d.name, d.type, d.precision, d.onnx_nodes) for d in listing.layers] if listing else []
    seen = {n for n, *_ in names}
    names += [(row.name, "unknown", None, []) for row in (table.rows if table else []) if row.name not in seen]
    out = []
    for name, ltype, precision, nodes in names:
        m = REFORMAT_OF.match(name)
        reformat = ltype == "Reformat" or (ltype == "unknown" and m is not None)
        out.append(EngineLayer(name, ltype, precision, nodes or nodes_of(m.group(1) if m else name),
                               avg_ms=times.get(name), reformat=reformat, feeds=m.group(1) if m else None))  # fmt: skip
    return out
