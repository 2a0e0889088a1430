"""Every finding kind the parser emits, with its category: what suite gates may name; and the severities
of build-log and lint findings."""

from __future__ import annotations

import fnmatch
from typing import Literal

Severity = Literal["high", "medium", "info"]
SEVERITIES: tuple[Severity, ...] = ("high", "medium", "info")  # most severe first
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}

CATEGORIES = ("fallback", "calibration", "tactics", "accuracy", "build")

KINDS: dict[str, str] = {
    "dla_fallback": "fallback",
    "dla_unsupported": "fallback",
    "dla_unused": "fallback",
    "unsupported_op_plugin": "fallback",
    "plugin_created": "fallback",
    "precision_constraints_not_obeyed": "fallback",
    "layer_precision_fallback": "fallback",
    "calibrator_not_used": "calibration",
    "missing_scale": "calibration",
    "calibration_failure": "calibration",
    "calibration_cache_read": "calibration",
    "calibration_cache_written": "calibration",
    "random_calibration_data": "calibration",
    "calibration_progress": "calibration",
    "tactic_skipped_workspace": "tactics",
    "timing_cache": "tactics",
    "tactic_choice": "tactics",
    "int64_cast": "accuracy",
    "int32_clamp": "accuracy",
    "layernorm_fp16": "accuracy",
    "weight_conversion_issues": "accuracy",
    "fp16_weights_subnormal": "accuracy",
    "fp16_weights_underflow": "accuracy",
    "fp16_weights_overflow": "accuracy",
    "no_implementation": "build",
    "build_failure": "build",
    "library_error": "build",
    "library_version_mismatch": "build",
}


# every kind the precision lint emits (trtverify.lint), with whether TensorRT itself is the reason
LINT_KINDS: dict[str, bool] = {
    "nonfinite_initializer": False,
    "initializer_overflow": False,
    "initializer_underflow": False,
    "initializer_subnormal": False,
    "weight_saturation": False,
    "weight_underflow": False,
    "constant_saturated": False,
    "constant_flushed": False,
    "constant_changed": False,
    "activation_overflow": False,
    "activation_saturation": False,
    "activation_close_to_range": False,
    "activation_unknown": False,
    "qdq_uncovered": True,
    "qdq_invalid_scale": False,
    "qdq_nonzero_zero_point": True,
    "subgraph_skipped": False,
    "external_data_not_loaded": False,
}


def selects(name: str, kind: str, category: str) -> bool:
    """A gate name selects a finding by category, exact kind, or a glob over kinds (fp16_weights_*)."""
    return name == category or fnmatch.fnmatchcase(kind, name)


def known(name: str) -> bool:
    return name in CATEGORIES or any(fnmatch.fnmatchcase(k, name) for k in KINDS)
