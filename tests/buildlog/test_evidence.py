"""Evidence and entities in every finding (buildlog/evidence.py, entities.py), over the whole corpus, and the
entity extractor on lines as the tools write them."""

from __future__ import annotations

from pathlib import Path

from trtverify.buildlog.entities import extract
from trtverify.buildlog.evidence import HEAD, LINE, TAIL, cut
from trtverify.buildlog.lines import clean_line
from trtverify.buildlog.parser import parse

DATA = Path(__file__).resolve().parents[1] / "data"
LOGS = sorted(DATA.glob("logcorpus/*/*.log")) + sorted(DATA.glob("buildlogs/**/*.log"))


def test_every_finding_of_the_corpus_has_its_lines_and_entities() -> None:
    findings = more = with_entities = 0
    for path in LOGS:
        text = path.read_text(encoding="utf-8", errors="replace")
        raw = text.split("\n")
        data = parse(text).dump()  # what --json and results.json carry
        for f in data["findings"]:
            findings += 1
            assert "entities" in f and f["evidence"], (path.name, f["kind"])
            shown = [e for e in f["evidence"] if e["line"] is not None]
            for e in shown:  # the line as written, cut only in the middle
                want = clean_line(raw[e["line"] - 1])
                assert e["text"] == want or (len(want) > LINE and e["text"] == cut(want)), (path.name, e)
            distinct = list(dict.fromkeys(f["lines"]))
            assert [e["line"] for e in shown] == (distinct if len(distinct) <= HEAD + TAIL + 1 else
                                                 distinct[:HEAD] + distinct[-TAIL:])  # fmt: skip
            if len(shown) < len(distinct):  # never silently dropped: the rest counted
                more += 1
                assert f["evidence"][HEAD]["text"].startswith(f"... {len(distinct) - HEAD - TAIL} more lines")
            with_entities += bool(f["entities"])
    assert (findings, more > 10, with_entities > findings // 2) == (findings, True, True) and findings > 300, (
        findings,
        more,
        with_entities,
    )


def test_entities_as_the_tools_write_them() -> None:
    got = extract(
        "Requested amount of GPU memory (33555480576 bytes) could not be allocated; workspace 512 MiB, 1.5 GB\n"
        "Engine generation completed in 15.4544 seconds. Total time: 00:00:47; Latency: mean = 2.47 ms\n"
        "[virtualMemoryBuffer.cpp::resizePhysical::140] Error Code 2: OutOfMemory; loading /models/resnet50.engine\n"
        "No importer registered for op: DCN; Layer '/model.22/Concat' (CONCATENATION); input shape [1,3,640,640]\n"
        "TensorRT version: 10.4.0, CUDA 12.2, libnvinfer.so.8.6.1, [TensorRT v8502]"
    )
    assert {"text": "33555480576 bytes", "bytes": 33555480576} in got["sizes"]
    assert {"text": "512 MiB", "bytes": 512 << 20} in got["sizes"]
    assert {"text": "1.5 GB", "bytes": 1_500_000_000} in got["sizes"]
    assert {"text": "15.4544 seconds", "seconds": 15.4544} in got["durations"]
    assert {"text": "00:00:47", "seconds": 47.0} in got["durations"]
    assert {"text": "2.47 ms", "seconds": 0.00247} in got["durations"]
    assert "Error Code 2" in got["error_codes"]
    assert "/models/resnet50.engine" in got["files"] and "virtualMemoryBuffer.cpp" in got["files"]
    assert "DCN" in got["ops"] and "/model.22/Concat" in got["names"] and "[1,3,640,640]" in got["shapes"]
    versions = {(v["tool"], v["version"]) for v in got["versions"]}
    assert {("TensorRT", "10.4.0"), ("CUDA", "12.2"), ("TensorRT", "8.6.1"), ("TensorRT", "8.5.2")} <= versions
    # a timestamp is not a duration, a date is not a path
    assert extract("[10/12/2024-15:46:16] [TRT] [I] done") == {}


def test_a_log_nobody_wrote_a_rule_for() -> None:
    """docs/buildlog.md's made-up C++ service: its context, and its `[warn]` / `[error]` lines as generic findings."""
    text = (DATA / "docrun" / "detector_service.log").read_text(encoding="utf-8")
    log = parse(text)
    ctx = log.context
    assert [(t.detail["tool"], t.value) for t in ctx.tools] == [
        ("TensorRT", "10.3.0"), ("CUDA", "12.6"), ("driver", "560.35.03")
    ]  # fmt: skip
    assert [g.detail.get("compute_capability") for g in ctx.gpus] == [None, "8.9"] and ctx.gpus[0].value == "NVIDIA L4"
    assert [m.value for m in ctx.models] == ["/opt/models/yolo_det_v7.onnx"]
    engine = "/var/cache/detsvc/yolo_det_v7_fp16_b8.engine"
    assert [(e.value, e.line, e.detail.get("direction")) for e in ctx.engines] == [
        (engine, 5, "read"), (engine, 9, "written")
    ]  # fmt: skip
    assert [(s.detail["input"], s.detail["role"], s.value) for s in ctx.shapes] == [
        ("images", "min", "[1,3,640,640]"), ("images", "opt", "[4,3,640,640]"), ("images", "max", "[8,3,640,640]")
    ]  # fmt: skip
    assert [p.value for p in ctx.precision] == ["fp16"] and [b.value for b in ctx.batch_size] == ["8"]
    assert ("105.6 s", 9) in [(f.value, f.line) for f in ctx.figures]
    errors = [f for f in log.findings if f.kind == "log_error"]
    assert len(errors) == 1 and errors[0].count == 2 and errors[0].severity == "high"
    assert (errors[0].detail["first_line"], errors[0].detail["last_line"]) == (10, 11)
    assert errors[0].entities["error_codes"] == ["cudaErrorMemoryAllocation"]
    assert errors[0].entities["sizes"] == [{"text": "1.5 GiB", "bytes": 1610612736}]
    warnings = [f for f in log.findings if f.kind == "log_warning"]
    assert [w.lines for w in warnings] == [(6,), (8,)] and "/model.24/Softmax" in warnings[1].layers
