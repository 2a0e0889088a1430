"""Each tests/data/buildlogs/<name>.log against its hand-written <name>.expected.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trtverify.buildlog.parser import parse, parse_file

DATA = Path(__file__).resolve().parents[1] / "data" / "buildlogs"
EXPECTED = sorted(DATA.glob("*.expected.json"))


@pytest.mark.parametrize("expected_path", EXPECTED, ids=lambda p: p.name.removesuffix(".expected.json"))
def test_log_matches_expected(expected_path: Path) -> None:
    expected = json.loads(expected_path.read_text())
    log = parse_file(expected_path.with_name(expected_path.name.replace(".expected.json", ".log")))
    # the generic findings (log_error, log_warning, log_event) are compared where the file lists some; every log's
    # floor is checked by tests/buildlog/test_floor.py (no error or warning line reported by nothing)
    floor = {"log_error", "log_warning", "log_event"} - {f["kind"] for f in expected["findings"]}
    got = {(f.kind, f.severity, f.count, f.lines[0]) for f in log.findings if f.kind not in floor}
    want = {(f["kind"], f["severity"], f["count"], f["first_line"]) for f in expected["findings"]}
    assert got == want
    layers = {f.kind + ":" + str(f.lines[0]): list(f.layers) for f in log.findings}
    for f in expected["findings"]:
        assert layers[f["kind"] + ":" + str(f["first_line"])] == f["layers"]
    assert log.version == expected["version"]
    assert log.dialect == expected["dialect"]
    if "layers" in expected:
        got_layers = [{k: v for k, v in row.dump().items() if k != "line"} for row in log.layers]
        assert got_layers == expected["layers"]
    if "layer_precisions" in expected:
        assert [row.precision for row in log.layers] == expected["layer_precisions"]
    assert type(log).model_validate(json.loads(json.dumps(log.dump()))) == log  # serialisable, and read back


def test_expected_files_present() -> None:
    assert len(EXPECTED) >= 19


def test_continuation_and_wrap_lines_join() -> None:
    text = "[W] first part\n    indented continuation\n[I] next\n"
    log_records = __import__("trtverify.buildlog.lines", fromlist=["split_records"]).split_records(text)
    assert [(r.first, r.last, r.severity) for r in log_records if r.dialect != "blank"] == [
        (1, 2, "warning"),
        (3, 3, "info"),
    ]


def test_dialect_prefixes() -> None:
    from trtverify.buildlog.lines import match_prefix

    cases = {
        "[11/01/2024-10:32:48] [V] [TRT] msg": ("trtexec", "verbose"),
        "[TRT] [W] msg": ("python", "warning"),
        "[TensorRT] WARNING: msg": ("python", "warning"),
        "[W] msg": ("polygraphy", "warning"),
        "WARNING: [TRT]: msg": ("deepstream", "warning"),
        "ERROR: [Torch-TensorRT TorchScript Conversion Context] - msg": ("torch_tensorrt", "error"),
        "2021-01-07 22:13:56.065442: E tensorflow/compiler/tf2tensorrt/utils/trt_logger.cc:41] DefaultLogger msg": (
            "tftrt",
            "error",
        ),
        "2023-01-01 10:00:00.123 [W:onnxruntime:Default, tensorrt_execution_provider.h:83 log] [2023-01-01 "
        "10:00:00 WARNING] msg": (
            "onnxruntime",
            "warning",
        ),
        "[VERBOSE] msg": ("rtx", "verbose"),
        "[INTERNAL_ERROR] msg": ("rtx", "internal_error"),
    }
    for line, (dialect, sev) in cases.items():
        hit = match_prefix(line)
        assert hit is not None and hit[:2] == (dialect, sev) and hit[2] == "msg", line


def test_repeats_fold_and_ansi_damage() -> None:
    line = (
        "\x1b[33m[TRT] [W] onnx2trt_utils.cpp:369: Your ONNX model has been generated with INT64 "
        "weights, while TensorRT does not natively support INT64. Attempting to cast down to INT32.\x1b[0m\r\n"
    )
    log = parse(line * 3)
    (f,) = log.findings
    assert (f.kind, f.count, f.lines) == ("int64_cast", 3, (1, 2, 3))


def test_rtx_logs_parse() -> None:
    for path in sorted((DATA / "rtx").glob("*.log")):  # Polygraphy-logged TensorRT-RTX builds
        log = parse_file(path)
        assert log.version == "1.7.1.116" and log.dialect == "polygraphy"
        assert log.layers and all(row.precision for row in log.layers if row.type not in ("signal", "wait")), path.name


def test_every_shared_log_has_a_copy_and_an_expected_file() -> None:
    """CI has ../shared beside the clone; elsewhere this is skipped."""
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "buildlogs"
    if not shared.is_dir():
        pytest.skip("../shared/buildlogs not present")
    for log in sorted(shared.glob("*.log")):
        copy = DATA / log.name
        assert copy.read_bytes() == log.read_bytes(), f"{log.name}: tests/data copy differs"
        assert copy.with_name(log.name.replace(".log", ".expected.json")).exists(), f"{log.name}: no expected findings"


def test_parse_log_json_follows_its_schema() -> None:
    """`parse-log --json` (with --against) validates against `trtverify schema --parse-log`, and the text output
    gives the unknown-line rate."""
    import jsonschema

    from tests.conftest import ROOT, run_cli

    new = ROOT / "demo/fashion_mnist/buildlogs/fashion_cnn_int8_qdq__mark_all.log"
    old = ROOT / "demo/fashion_mnist/buildlogs/fashion_cnn_fp32__mark_all.log"
    r = run_cli("parse-log", str(new), "--against", str(old), "--json")
    assert r.code == 0, r.err
    schema = run_cli("schema", "--parse-log")
    jsonschema.validate(json.loads(r.out), json.loads(schema.out))
    assert json.loads(r.out)["against"]["log"] == str(old)
    text = run_cli("parse-log", str(DATA / "rtx1_7_build_resnet18_verbose.log")).out
    assert "TensorRT-RTX (the log does not state its version)" in text
    assert "unrecognised lines: 23 of 1424 (1.6%)" in text and "no output 12" in text
