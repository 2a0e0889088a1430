"""The JSON Schema of results.json, generated from the typed models (the committed file is this
output; `tests/results/test_schema.py` keeps them in step: `trtverify schema --results > FILE`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from trtverify.results.models import document

SCHEMA_FILE = Path(__file__).with_name("results.schema.json")


class _Schema(GenerateJsonSchema):
    """Floats may be the strings "nan", "inf" and "-inf": JSON has no non-finite numbers."""

    def float_schema(self, schema: core_schema.FloatSchema) -> JsonSchemaValue:
        return {"anyOf": [super().float_schema(schema), {"enum": ["nan", "inf", "-inf"]}]}


def results_schema() -> dict[str, Any]:
    schema = document().model_json_schema(mode="serialization", schema_generator=_Schema)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://trtverify.invalid/results.schema.json",
        **schema,
        "title": "trtverify results.json",
    }


def schema_text() -> str:
    return json.dumps(results_schema(), indent=2, sort_keys=False) + "\n"
