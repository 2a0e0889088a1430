"""The typed result of the layerwise stage."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trtverify.compare.checks import Histogram
from trtverify.lint.findings import LintFinding
from trtverify.stages.base import StageResult
from trtverify.stages.baseline import VsBaseline
from trtverify.stages.layerwise.capmodels import CapturePair
from trtverify.stages.layerwise.detmodels import DetectionRow
from trtverify.stages.layerwise.graphmodels import NodeGraph
from trtverify.util.record import Record, optional


class PairNote(Record):
    """Why a reference tensor pairs with a candidate tensor other than its same-named, same-producer twin."""

    how: Literal["rename", "inserted", "folded", "renamed_output", "output", "structure"] = Field(
        description="rename: the suite's rename; inserted: after Q/DQ or casts the candidate inserted; folded: the "
        "node was folded into the candidate's node before it; renamed_output: same node, output renamed; output: a "
        "graph output both declare; structure: names differ, the node computing it is the reference's (same "
        "operation on paired inputs, equal weights; docs/stages/layerwise.md#pairing)"
    )
    why: str | None = Field(description="one sentence: what was paired and why")
    candidate_node: str | None = optional("the candidate node computing the value, where it is not the reference's")
    candidate_op_type: str | None = optional()


class Row(Record):
    """One compared tensor, in the reference's topological order."""

    tensor: str = Field(description="the reference tensor")
    candidate_tensor: str | None = optional("the candidate's tensor, when it is named differently")
    pairing: PairNote | None = optional("how the pair was made, where it is not by name and producer alone")
    not_comparable: str | None = optional(
        "why it is not compared: the candidate rewrote it, or it is after a plugin node without a reference "
        "('after plugin X (no reference)'); left out of every check"
    )
    compared_by: str | None = optional(
        "set where the tensor is compared by what it selects, not element by element: an index tensor (metric "
        "selected_overlap) or values picked by one (sorted_rel_l2); never a root cause (docs/stages/layerwise.md#index-"
        "tensors); or 'statistics ...' where a capture holds its statistics alone (metric stats_diff, "
        "docs/captured.md)"
    )
    node: str | None = Field(description="the reference node that produces it")
    op_type: str | None
    topo_index: int = Field(description="the node's position in the reference's topological order")
    shape: list[int] | None
    dtype: str | None
    candidate_dtype: str | None
    samples: int
    metrics: dict[str, float] = Field(description="the worst value of each metric across samples")
    ref_nan: int | None = optional()
    ref_inf: int | None = optional()
    cand_nan: int | None = optional()
    cand_inf: int | None = optional()
    nonfinite_mismatch: int | None = optional("positions where reference and candidate disagree about finiteness")
    ref_only_nonfinite: int | None = optional("of those, non-finite in the reference only")
    cand_only_nonfinite: int | None = optional("of those, non-finite in the candidate only")
    saturated: int | None = optional(
        "positions at their type's extreme on both sides, same sign, different values (a mask's fill: -inf in the "
        "reference, -65504 in the candidate): equal by meaning, left out of the metrics; what follows decides"
    )
    saturated_values: list[float] | None = optional("the first such pair: [reference, candidate]")
    errors: list[str] | None = optional("why samples could not be compared")
    passed: bool
    failed: list[str] | None = optional("the checks it fails, e.g. 'rel_l2 <= 0.01'")
    lint: list[str] | None = optional("kinds of the lint findings about this tensor or its node")


class FirstDivergence(Record):
    tensor: str
    node: str | None
    op_type: str | None
    topo_index: int
    metrics: dict[str, float]
    nonfinite_mismatch: int | None = optional("values non-finite on one side only")
    ref_only_nonfinite: int | None = optional("of those, non-finite in the reference only")
    cand_only_nonfinite: int | None = optional("of those, non-finite in the candidate only")
    failed: list[str]


class RootCause(Record):
    """A suspect: a node ranked by its own error (isolate) or the error it adds (amplification)."""

    rank: int = 0
    node: str | None
    op_type: str | None
    tensor: str
    topo_index: int
    score: float = Field(
        description="local rel_l2 (isolate) or added rel_l2 (amplification); higher is worse; +inf where the output "
        "turns non-finite where the reference is finite (ranked first); never NaN"
    )
    pairing: PairNote | None = optional("how its tensor was paired, where a rewrite moved the work to this node")
    nonfinite: int | None = optional("values non-finite where the reference's are finite (or the other way round)")
    ref_only_nonfinite: int | None = optional("of those, non-finite in the reference only")
    cand_only_nonfinite: int | None = optional("of those, non-finite in the candidate only")
    inputs_nonfinite: list[str] | None = optional(
        "its inputs whose reference values are not finite in the candidate's type (the error starts before it)"
    )
    shape_mismatch: str | None = optional(
        "isolate: fed the reference's inputs, it gives another shape than the reference's (ranked first)"
    )
    local: dict[str, float] | None = optional("isolate: the node's own error on the reference's inputs")
    added_rel_l2: float | None = optional("amplification: output rel_l2 minus the largest input rel_l2")
    amplification: float | None = optional("amplification: output rel_l2 / largest input rel_l2")
    inherited_rel_l2: float = Field(description="the largest rel_l2 of its inputs")
    output_rel_l2: float | None = Field(description="rel_l2 of its output in the full candidate")
    exceeds_checks: bool
    confirmed_local: dict[str, float] | None = optional("confirm_top: its own error on the candidate's backend")
    not_confirmed: str | None = optional("confirm_top: why it could not be confirmed")


class SuspectHistogram(Histogram):
    """The error histogram of a suspect tensor (the first divergence, the top root causes)."""

    tensor: str
    node: str | None
    op_type: str | None
    topo_index: int
    reason: str = Field(description="why it is a suspect, e.g. 'first divergence, root cause #1'")


class CandidateOnly(Record):
    """Tensors the candidate alone has, by why they exist."""

    qdq: list[str] = Field(description="outputs of QuantizeLinear / DequantizeLinear")
    cast: list[str] = Field(description="casts inserted by FP16 converters")
    renamed: list[str] = Field(description="outputs of a node the reference also has, renamed by a converter")
    other: list[str]
    not_compared: list[str] = Field(
        default_factory=list,
        description="the reference's own tensors, which it does not compare (constants, shape computations): a "
        "capture marking every tensor holds them",
    )


class Unmatched(Record):
    reference_only: list[str]
    reference_only_reason: str
    reference_only_why: dict[str, str] = Field(
        default_factory=dict, description="reference tensor -> why the candidate lacks it, where known (folded)"
    )
    candidate_only: CandidateOnly
    ignored: list[str]
    bad_renames: list[str] = Field(description="rename sources the reference does not have")
    suggested_renames: dict[str, str] = Field(
        default_factory=dict,
        description="reference tensor -> candidate tensor a rename could pair: only-here tensors of equal shape "
        "computed by the same operation, one of each kind on each side (none where that is not certain)",
    )


class Coverage(Record):
    """How many of the reference's tensors the candidate's were paired with: what a layerwise verdict rests on."""

    reference_tensors: int = Field(description="the reference's value tensors (shape arithmetic left out)")
    paired: int = Field(description="reference tensors paired with a candidate tensor (compared)")
    with_counterpart: int = Field(
        description="reference tensors the candidate has a counterpart for by op type: per op type (fused and "
        "quantised forms counted as theirs), the smaller of the reference's count and the candidate's exposed "
        "tensors' count, summed; the Q/DQ and casts that lowering inserts count for neither side"
    )
    required: int = Field(
        description="paired tensors the check `tensors paired` asks for: min_paired x with_counterpart"
    )
    min_paired: float = Field(description="stages.layerwise.min_paired")
    by: dict[str, int] = Field(
        description="pairs by how they were made: name (same name, same producer), or a PairNote `how`"
    )
    structure_error: str | None = optional("why structural pairing stopped short (pairs by name only then)")
    passed: bool


class RangeRow(Record):
    tensor: str = Field(description="the reference tensor the QuantizeLinear reads (its candidate name may differ)")
    quantize_node: str | None = optional("the QuantizeLinear (a candidate's ranges; none in a calibration cache's)")
    cache_line: int | None = optional("a calibration cache's ranges: the tensor's line in the cache file")
    limit: float = Field(description="the largest |x| the QuantizeLinear represents without clipping")
    step: float = Field(description="its quantization step (scale)")
    reference_max_abs: float = Field(description="the largest |x| of the reference's values, over the samples")
    clipped_fraction: float = Field(description="share of the reference's values beyond the limit")
    step_over_median: float | None = Field(
        description="step / median nonzero |x| of the reference's values (zeros are exact at any step; None: all 0)"
    )
    samples: int


class CacheRanges(Record):
    """A TensorRT calibration cache's ranges (backends.tensorrt.calibration_cache) against the reference's values."""

    path: str
    header: str | None = Field(description="its first line, e.g. TRT-8601-EntropyCalibration2 (None: it has none)")
    calibrator: str | None = Field(description="the calibrator the header names, e.g. EntropyCalibration2")
    tensorrt_version: str | None = Field(description="the TensorRT version the header names, e.g. 8.6.1")
    entries: int = Field(description="tensor scales in the cache")
    matched: int = Field(description="of them, judged: named like a reference tensor (or input) with finite values")
    unmatched: int = Field(description="of them, named like no reference tensor or input (TensorRT's own tensors)")
    unmatched_examples: list[str] = Field(description="the first few unmatched names")
    rows: list[RangeRow] = Field(description="per judged tensor: its range (scale * 127) against the reference's "
                                 "values, the worst first")  # fmt: skip


class LayerwiseCandidate(Record):
    name: str
    backend: str
    model: str
    samples: int
    precision: str = Field(description="what the candidate computes in (its `precision`, else read from the graph)")
    precision_mix: dict[str, int] | None = optional(
        "compute nodes per precision, read from the graph's types and Q/DQ (INT8/FP8/INT4: a Conv/Gemm/MatMul "
        "reading a DequantizeLinear; else its output's float type)"
    )
    emulation: str | None = optional("how the candidate ran where this machine lacks its types (BF16 on a CPU)")
    checks_source: str = Field(
        description="where its checks come from: stages.layerwise.candidate_checks, stages.layerwise.checks, "
        "or 'default for PRECISION'"
    )
    chunks: int = Field(description="passes over the samples (tensors exposed in chunks that fit the memory budget)")
    first_divergence: FirstDivergence | None = Field(description="the first row that breaks the checks")
    root_cause_method: Literal["isolate", "amplification"]
    root_causes: list[RootCause]
    histograms: list[SuspectHistogram]
    not_isolated: dict[str, str] = Field(description="tensor -> why its node could not be isolated")
    rows: list[Row]
    detections: list[DetectionRow] | None = optional(
        "detection outputs compared box to box (docs/stages/layerwise.md#detections), instead of their tensors' rows"
    )
    detection_checks_source: str | None = optional(
        "where the detection checks come from: stages.layerwise.detections.checks / .candidate_checks, or "
        "'default for PRECISION'"
    )
    paired: Coverage | None = optional("how many reference tensors were paired, and how (the check `tensors paired`)")
    unmatched: Unmatched
    plugins: list[str] | None = optional(
        "each plugin node of the candidate and what computed it here (trtverify's built-in numpy reference, the "
        "user's hook, a custom-op library, or nothing), e.g. \"EfficientNMS_TRT '/nms' by trtverify's built-in numpy "
        'reference ..."'
    )
    after_plugins: dict[str, int] | None = optional(
        "tensors not computed, by the plugin without a reference they wait on ('after plugin X (no reference)'): "
        "rows of their own, left out of every check"
    )
    ranges: list[RangeRow] | None = optional(
        "quantized candidates: per quantized activation, its calibrated range against the reference's values "
        "(clipped share, step against the median nonzero |x|), the worst first"
    )
    lint: list[LintFinding] = Field(description="static precision lint of the candidate model")
    consistency: list[str] | None = optional(
        "captured: what its consistency feeds and outputs-only capture checked (each a check), or why not"
    )
    vs_baseline: VsBaseline | None = optional(
        "its worst tensor's rel_l2 against the stored baseline's (max_increase_vs_baseline; after --update-baseline: "
        "what was written)"
    )
    graph: NodeGraph | None = optional("the reference's dataflow graph with this candidate's errors, types and marks")
    passed: bool


class LayerwiseReference(Record):
    model: str
    tensors: int
    chunks: int
    store: str = Field(description="where the reference's intermediates were kept: memory, or disk (memory-mapped)")


class LayerwiseResult(StageResult):
    """Stage layerwise: every intermediate tensor of the reference against each candidate."""

    name: Literal["layerwise"] = "layerwise"
    samples: int | None = optional()
    reference: LayerwiseReference | None = optional()
    candidates: list[LayerwiseCandidate] | None = optional()
    calibration_cache: CacheRanges | None = optional(
        "backends.tensorrt.calibration_cache judged against the reference's values (stages/layerwise.md#calibrated-"
        "ranges)"
    )
    capture_pairs: list[CapturePair] | None = optional(
        "two or more captured candidates against each other: per pair, the first tensor where they differ and where "
        "they part (docs/captured.md#captures-against-each-other-and-consistency)"
    )
    baseline_file: str | None = optional(
        "the accuracy baseline compared with or written (reference_outputs/<suite>/layerwise/baseline.json)"
    )
