"""A floor under every error and warning (trtverify/buildlog/floor.py): no line a tool marks as an error or a
warning goes unreported. The snippets follow the formats of public logs (TensorRT, Polygraphy, Torch-TensorRT,
ONNX Runtime's TensorRT EP); they are written here, not copied."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtverify.buildlog.floor import level, template
from trtverify.buildlog.lines import split_records
from trtverify.buildlog.parser import parse, parse_file

CORPUS = Path(__file__).resolve().parents[1] / "data" / "logcorpus"
LOGS = sorted(CORPUS.glob("*/*.log")) + sorted((CORPUS.parent / "buildlogs").rglob("*.log"))


def _kinds(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in parse(text).findings:
        out.setdefault(f.kind, []).append(f)
    return out


@pytest.mark.parametrize(
    "text,kind,severity,names",
    [
        (
            "[10/02/2024-09:14:52] [E] Error[9]: Skipping tactic 0x0000000000000000 due to exception "
            "[autotuner.cpp:getBestTactic:1290] autotuning: User allocator error allocating 86114304-byte buffer",
            "log_error",
            "high",
            [],
        ),
        (
            "python3: /_src/myelin/graph.cpp:1234: void myelin::ir::check(): Assertion `n->inputs().size() == 2' "
            "failed.\nAborted (core dumped)",
            "log_error",
            "high",
            ["n->inputs().size() == 2"],
        ),
        (
            "WARNING: [Torch-TensorRT] - Unable to read CUDA capable devices. Return status: 35",
            "log_warning",
            "info",
            [],
        ),
        (
            "2024-05-02 10:11:12.123456789 [W:onnxruntime:Default, tensorrt_execution_provider.h:84 log] "
            "[2024-05-02 10:11:12 WARNING] Tensor 'onnx::Conv_12' has no dynamic range set: it may run in FP32",
            "log_warning",
            "info",
            ["onnx::Conv_12"],
        ),
        (
            "[I] onnxrt-runner-N0 | Validating output: logits (check_inf=True, check_nan=True)\n"
            "[E]     NaN Detected | One or more non-finite values were encountered in this output",
            "log_error",
            "high",
            [],
        ),
        (
            "ERROR: [Torch-TensorRT TorchScript Conversion Context] - 4: [network.cpp::validate::3011] Error Code 4: "
            "Internal Error (Network has dynamic or shape inputs, but no optimization profile has been defined.)",
            "log_error",
            "high",
            [],
        ),
    ],
)
def test_a_marked_line_becomes_a_finding_with_its_severity_and_names(text, kind, severity, names):
    found = _kinds(text)
    assert kind in found, found
    f = found[kind][0]  # an assertion and the abort after it are two lines, two findings
    assert f.severity == severity
    for n in names:
        assert n in f.layers, f.layers
    assert f.detail["log_severity"] in ("error", "abort", "warning")


def test_repeats_of_one_message_are_one_finding_with_every_line_and_name():
    text = "\n".join(
        f"[11/02/2023-10:00:{i:02d}] [W] [TRT] Weights for layer 'conv_{i}' are subnormal in FP16" for i in range(5)
    )
    (f,) = _kinds(text)["log_warning"]
    assert f.count == 5 and list(f.lines) == [1, 2, 3, 4, 5]
    assert [f"conv_{i}" for i in range(5)] == [n for n in f.layers if n.startswith("conv_")]
    assert f.detail["template"] == "Weights for layer '<name>' are subnormal in FP16"


def test_a_line_a_family_rule_reports_gets_no_generic_finding_too():
    text = "[02/04/2024-10:00:00] [E] [TRT] ModelImporter.cpp:726: While parsing node number 3 [Round]:\n" + (
        "[02/04/2024-10:00:00] [E] [TRT] 3: getPluginCreator could not find plugin: Round version: 1"
    )
    found = _kinds(text)
    assert "plugin_not_found" in found
    covered = {line for f in found["plugin_not_found"] for line in f.lines}
    generic = [line for k in ("log_error", "log_warning") for f in found.get(k, []) for line in f.lines]
    assert not covered & set(generic)


def test_unmarked_lines_are_not_errors():
    for text in ("[I] Error Metrics: logits", "Average on 10 runs - GPU latency: 1.2 ms", "no errors found", ""):
        assert all(level(r) is None for r in split_records(text)), text
    assert template("conv_12 at /a/b/c.cpp:12 0x1f 3.5e-3") == "conv_<n> at <path>:<n> <hex> <n>"


@pytest.mark.parametrize("path", LOGS, ids=lambda p: p.name[:40])
def test_no_log_with_an_error_or_warning_line_ends_with_zero_findings(path):
    """And every marked line is among the lines of some finding (a family's, or the floor's)."""
    log = parse_file(path)
    records = split_records(path.read_text(encoding="utf-8", errors="replace"))
    marked = [r for r in records if level(r) is not None]
    if not marked:
        return
    assert log.findings, path.name
    reported = {line for f in log.findings for line in f.lines}
    missing = [r.first for r in marked if not any(x in reported for x in range(r.first, r.last + 1))]
    assert not missing, f"{path.name}: marked lines reported by nothing: {missing[:10]}"


@pytest.mark.parametrize(
    "message,want",
    [
        # Polygraphy's warning after `No shapes provided` (TensorRT-RTX logs of tests/data/buildlogs/rtx) read
        # [to, tensor]: the words after `tensor` and `input` in a sentence are not names
        (
            "This will cause the tensor to have a static shape. If this is incorrect, please set the range of shapes "
            "for this input tensor.",
            [],
        ),  # fmt: skip
        ("Input tensor: input (dtype=DataType.FLOAT, shape=(-1, 3, 224, 224)) | No shapes provided", ["input"]),
        ("Tensor DataType is determined at build time for tensors not marked as input or output.", []),
        ("Layer   Time (ms)   Avg. Time (ms)", []),
        ('CUDA lazy loading is not enabled. See "Lazy Loading" section of CUDA documentation', []),
        ("ModelImporter.cpp:723: --- End node ---", []),
        ("polygraphy convert model.onnx --int8 --output tmp.trt", []),
        # names after the same words: identifiers, numbers, a capitalised name after a lower-case keyword
        (
            "Missing scale and zero-point for tensor /0/model.22/Squeeze_output_0, expect fall back",
            ["/0/model.22/Squeeze_output_0"],
        ),
        ("Missing scale and zero-point for tensor 768, expect fall back to non-int8", ["768"]),
        ("Default DLA is enabled but layer leaky_1 is not supported on DLA", ["leaky_1"]),
        ("Default DLA is enabled but layer Embedding matrix is not supported on DLA", ["Embedding"]),
        ("getPluginCreator could not find plugin OneHot version 1", ["OneHot"]),
        ("Failed to parse onnx, In node 1143 (importFallbackPluginImporter)", ["1143"]),
        ("Weights for layer 'conv 1 + relu' are subnormal", ["conv 1 + relu"]),
    ],
)
def test_names_are_names_not_the_words_of_a_sentence(message: str, want: list[str]):
    from trtverify.buildlog.floor import names

    assert names(message) == want


def test_a_long_message_is_cut_after_a_sentence_or_a_word_and_says_so():
    """A warning of 420 characters was kept as its first 300 (`... same OS was used and version`), and parse-log
    printed 160 (`See "Lazy Loading" section of C`): both cut mid-word, with nothing saying more followed."""
    from trtverify.buildlog.floor import MESSAGE
    from trtverify.report.text import buildlog_summary

    words = "Check that the engine was not created using safety runtime, same OS was used and version compatibility"
    text = f"[11/02/2023-10:00:00] [E] [TRT] 1: [stdArchiveReader.cpp::53] Error Code 1: Serialization ({words} " * 4
    (f,) = _kinds(text.strip())["log_error"]
    assert len(f.message) <= MESSAGE and f.message.endswith(" ...")
    kept = f.message.removesuffix(" ...")
    assert text.strip().split("[TRT] ", 1)[1].startswith(kept) and text.split("[TRT] ", 1)[1][len(kept)] == " "

    lazy = (
        "[03/05/2024-11:00:00] [W] CUDA lazy loading is not enabled. Enabling it can significantly reduce device "
        'memory usage and speed up TensorRT initialization. See "Lazy Loading" section of CUDA documentation '
        "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#lazy-loading"
    )
    (line,) = [ln for ln in buildlog_summary(Path("x.log"), parse(lazy), None, None) if "log_warning" in ln]
    assert line.endswith("speed up TensorRT initialization. ..."), line
