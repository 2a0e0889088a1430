"""Every finding kind the parser emits, with its category: what suite gates may name; and the severities
of build-log and lint findings."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Literal

from trtverify.util.errors import unknown

Severity = Literal["high", "medium", "info"]
SEVERITIES: tuple[Severity, ...] = ("high", "medium", "info")  # most severe first
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}

CATEGORIES = ("fallback", "calibration", "tactics", "accuracy", "build", "performance", "comparison")

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

# The message families of the log corpus (tests/data/logcorpus/*/families.txt): kind -> family. A rule matches a
# family across versions, prefixes and wrapping; bench/logcorpus_recognition.py counts recognition by family.
FAMILIES: dict[str, str] = {
    "dla_fallback": "dla_placement",
    "dla_unsupported": "dla_placement",
    "dla_unused": "dla_placement",
    "layer_precision_fallback": "precision_fallback",
    "precision_constraints_not_obeyed": "precision_fallback",
    "unsupported_op_plugin": "plugin_missing",
    "missing_scale": "missing_scale",
    "calibration_progress": "calibration",
    "calibration_failure": "calibration",
    "calibrator_not_used": "calibration",
    "calibration_cache_read": "calibration_cache",
    "calibration_cache_written": "calibration_cache",
    "random_calibration_data": "polygraphy_random_calibration",
    "tactic_choice": "tactic",
    "tactic_skipped_workspace": "tactic",
    "timing_cache": "tactic",
    "layernorm_fp16": "fp16_layernorm",
    "no_implementation": "no_implementation",
}

# New kinds by module, kind -> (category, family); each module's rules emit only its own kinds.
PERFORMANCE_KINDS: dict[str, tuple[str, str]] = {  # trtverify/buildlog/performance.py
    "performance_summary": ("performance", "performance_summary"),
    "profile_table": ("performance", "profile_table"),
    "layer_listing": ("performance", "layer_info"),
}
POLYGRAPHY_KINDS: dict[str, tuple[str, str]] = {  # trtverify/buildlog/polygraphy.py
    # one hit per output compared; layers: the output names; detail: runners, tolerances, error statistics
    "polygraphy_compare_failed": ("comparison", "polygraphy_compare"),  # high
    "polygraphy_compare_passed": ("comparison", "polygraphy_compare"),  # info
    "polygraphy_compare_no_verdict": ("comparison", "polygraphy_compare"),  # info: numbers, no PASSED/FAILED line
    # `polygraphy debug build / precision / reduce`: iterations, pass rate, result; one hit per summary
    "polygraphy_debug_summary": ("comparison", "polygraphy_debug"),  # medium when it found a failure, else info
}
FAMILY_KINDS: dict[str, tuple[str, str]] = {  # trtverify/buildlog/families.py
    "dla_layers": ("fallback", "dla_placement"),  # info: the "Layers running on DLA / GPU" lists, wrapped or not
    "plugin_not_found": ("fallback", "plugin_missing"),  # high: a plugin or its creator is not registered
    "strongly_typed_usage": ("build", "strongly_typed_error"),  # high: API misuse in a strongly typed network
    "weak_typing_deprecated": ("build", "weak_typing_deprecated"),  # info: precision flags deprecated (TRT 10.x+)
    "build_time": ("performance", "build_time"),  # info: how long the build took; detail: seconds
    "tactic_selection_time": ("performance", "build_time"),  # info: of it, formats and tactics selection; seconds
    "calibration_cache_contents": ("calibration", "calibration_cache"),  # info: header and per-tensor scales
    "tftrt_native_segment": ("fallback", "tftrt_fallback"),  # medium: TF-TRT ran a segment in TensorFlow
    "ort_trt_ep_unsupported": ("fallback", "ort_trt_unsupported"),  # medium: nodes ONNX Runtime's TRT EP left out
}
FLOOR_KINDS: dict[str, tuple[str, str]] = {  # trtverify/buildlog/floor.py: where no family rule reported the line
    "log_error": ("build", "log_error"),  # high: a line its tool marks as an error, an assertion failure or an abort
    "log_warning": ("build", "log_warning"),  # info: a line its tool marks as a warning
    "log_event": ("build", "log_event"),  # info: a state change of a named thing on an info line (events.py)
}
# trtverify/buildlog/tools/ (issue 39): TensorRT-LLM, Torch-TensorRT, ModelOpt, engine files, Polygraphy convert /
# inspect, verbose builder lines, TensorRT-RTX; each module's KINDS, repeated here so that config needs no buildlog
TOOL_KINDS: dict[str, tuple[str, str]] = {
    "trtllm_build_time": ("performance", "build_time"),  # info: all engines, per network, serialization (s)
    "build_peak_memory": ("performance", "build_memory"),  # info: peak CPU / GPU MiB of the build
    "memory_shortfall": ("build", "build_memory"),  # high: an allocation that failed; requested / available bytes
    "torchtrt_partition": ("fallback", "torchtrt_partition"),  # info: engines, ops supported, coverage, settings
    "torchtrt_fallback": ("fallback", "torchtrt_fallback"),  # medium: ops left to PyTorch, with counts and why
    "torchtrt_engine": ("build", "torchtrt_engine"),  # info: per TRT subgraph: build s, network s, memory, ops
    "torchtrt_conversion": ("build", "torchtrt_engine"),  # info: the interpreter's node lines, per subgraph
    "modelopt_quantization": ("calibration", "modelopt"),  # info (high: random data, nothing selected)
    "engine_file": ("build", "engine_file"),  # info (high when missing / failed to load): path, action
    "polygraphy_artifact": ("tactics", "polygraphy_convert"),  # info: tactic replay / timing cache saved or loaded
    "engine_version_mismatch": ("build", "engine_version_mismatch"),  # high: both versions or tags, the fix
    "polygraphy_inspect": ("performance", "polygraphy_inspect"),  # info: counts, memory, output precisions
    "optimization_profiles": ("build", "polygraphy_convert"),  # info: min / opt / max per input
    "layer_fusion": ("tactics", "layer_fusion"),  # info: the fused pairs and the pass
    "myelin_failure": ("build", "myelin"),  # high: a Myelin error, with the tensor / op it names
    "myelin_region": ("build", "myelin"),  # info: a ForeignNode's first / last node, runner, the errors it met
    "profile_violation": ("build", "profile_violation"),  # high: input, shape set, profile bounds
    "rtx_run": ("build", "rtx"),  # info: version (from the build number), model, engine, options, status
    "rtx_runtime_cache": ("tactics", "rtx"),  # info: runtime cache written / loaded / reused, JIT lines
    # issue 47: Triton (tools/triton.py), ONNX Runtime's TensorRT and TensorRT-RTX EPs (ort_ep.py), DeepStream nvinfer
    "triton_model": ("build", "triton"),  # info (high: failed to load): state, version, backend, engine, instances
    "triton_server_options": ("build", "triton"),  # info: the server options table, key / value
    "triton_model_status": ("build", "triton"),  # info (high: a model not READY): model / version / status rows
    "trtllm_runtime": ("performance", "trtllm_runtime"),  # info: engine size, KV cache bytes / tokens / blocks
    "ort_ep_placement": ("fallback", "ort_ep"),  # info (medium: nodes left to CUDA / CPU): nodes per provider
    "ort_ep_unavailable": ("fallback", "ort_ep"),  # high: the provider not created: missing library, fallback
    "ort_ep_options": ("build", "ort_ep"),  # info: the EP's provider options (precision, caches, paths, profiles)
    "ort_ep_cache": ("tactics", "ort_ep"),  # info: engine / timing cache files written or read, paths
    "ort_ep_profile": ("build", "ort_ep"),  # info (medium: a warning): the EP's optimization profile messages
    "ort_ep_error": ("build", "ort_ep"),  # high: an engine the EP could not build or load, the fused node
    "deepstream_engine": ("build", "deepstream"),  # info (high: build failed): engine files, batch mode, bindings
    "deepstream_calibration": ("calibration", "deepstream"),  # medium: the INT8 calibration table missing
    "deepstream_custom_lib": ("build", "deepstream"),  # high: the custom library not opened, a function missing
}
for _table in (PERFORMANCE_KINDS, POLYGRAPHY_KINDS, FAMILY_KINDS, FLOOR_KINDS, TOOL_KINDS):
    for _kind, (_category, _family) in _table.items():
        KINDS[_kind] = _category
        FAMILIES[_kind] = _family


# every kind the precision lint emits (trtverify.lint), with whether TensorRT itself is the reason
LINT_KINDS: dict[str, bool] = {
    "nonfinite_initializer": False,
    "initializer_overflow": False,
    "initializer_underflow": False,
    "initializer_subnormal": False,
    "weight_saturation": False,
    "weight_underflow": False,
    "weight_per_tensor_scale": False,  # one INT8 scale over output channels whose ranges differ > 100x
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
    "shape_baked": False,  # an export fixed a dynamic size (lint/shapes.py): wrong at other sizes in any runtime
}


def selects(name: str, kind: str, category: str) -> bool:
    """A gate name selects a finding by category, exact kind, or a glob over kinds (fp16_weights_*)."""
    return name == category or fnmatch.fnmatchcase(kind, name)


def known(name: str) -> bool:
    return name in CATEGORIES or any(fnmatch.fnmatchcase(k, name) for k in KINDS)


def gate_names(names: list[str], kinds: Iterable[str], what: str) -> list[str]:
    """`names` of a `fail_on`: each a severity, a finding kind or a glob over kinds (ValueError naming the first
    that is none of them)."""
    kinds = list(kinds)
    for name in names:
        if name not in SEVERITIES and not any(fnmatch.fnmatchcase(k, name) for k in kinds):
            raise ValueError(unknown(what, name, [*SEVERITIES, *kinds]))
    return names
