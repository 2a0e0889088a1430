"""The engine layer table from layer-information dumps (`Layer(Type): name, Tactic: t, in -> out`
of TensorRT 8.x and `Name: n, LayerType: t, ..., TacticName/TacticValue, Metadata` of 8.4+ /
TensorRT-RTX detailed dumps). The line reader lives in trtverify.toolout.layerinfo, shared with the engine audit."""

from __future__ import annotations

from trtverify.buildlog.lines import LogRecord
from trtverify.toolout.layerinfo import EngineLayer, parse_layer_line, precision_of

__all__ = ["EngineLayer", "layer_table", "precision_of"]


def layer_table(records: list[LogRecord]) -> list[EngineLayer]:
    rows: list[EngineLayer] = []
    for r in records:
        for offset, text in enumerate(r.text.split("\n")):  # Polygraphy indents the listing
            row = parse_layer_line(text, r.first + offset)
            if row is not None:
                rows.append(row)
    return rows
