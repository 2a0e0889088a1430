"""The sensitivity table (repair/sensitivity.py) on the repair demos, with real ONNX Runtime and the demos' real
files: its top holds repair's keep-list, its rows say what keeping and lowering each node alone does, its bounds
hold, and the exclusion lists it writes parse as each tool reads them (ModelOpt's own pattern matcher, trtexec's
documented --layerPrecisions grammar, trtverify's candidate recipe)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml

from tests.conftest import ROOT
from trtverify.config.models import Candidate
from trtverify.config.stages import Sensitivity as Options
from trtverify.config.stages import precision_checks
from trtverify.convert.fp16 import to_fp16
from trtverify.repair.record import RepairRecord
from trtverify.repair.run import repair

REFERENCE = ROOT / "demo" / "fp16_repair" / "fashion_bn_fp32.onnx"  # a BatchNorm variance of 1e8 breaks FP16
MODELOPT_INT8 = ROOT / "demo" / "modelopt" / "fashion_bn_int8.onnx"  # ModelOpt's INT8, its FP16 rest clamps it
IMAGES = ROOT / "demo" / "fashion_mnist" / "data" / "test_subset.npz"


def rows(n: int, batch: int) -> list[dict[str, np.ndarray]]:
    with np.load(IMAGES, allow_pickle=False) as data:
        images = data["images"][: n * batch].astype(np.float32) / 255.0
    return [{"input": images[i * batch : (i + 1) * batch]} for i in range(n)]


def run(tmp_path: Path, precision: str, candidate: Path | None = None, **opts) -> RepairRecord:
    checks = precision_checks(precision)
    return repair(REFERENCE, precision, rows(2, 8), checks, tmp_path / "out", candidate=candidate,
                  sensitivity=Options(**opts))  # fmt: skip


@pytest.fixture(scope="module")
def fp16(tmp_path_factory: pytest.TempPathFactory) -> RepairRecord:
    return run(tmp_path_factory.mktemp("fp16"), "fp16")


def test_top_of_the_table_holds_repairs_keep_list_fp16(fp16: RepairRecord):
    sens = fp16.sensitivity
    assert sens is not None and fp16.passed and fp16.keep == ["/features/post_bn/BatchNormalization"]
    top = [r.name for r in sens.nodes[: len(fp16.keep)]]
    assert top == fp16.keep
    first = sens.nodes[0]
    # kept alone it passes and removes nearly all the error; lowered alone (all else FP32) it fails on its own
    assert first.kept_alone_passes and first.share_kept > 0.99
    assert first.lowered_alone_passes is False and first.share_lowered > 0.9
    assert sens.baseline is not None and sens.baseline > 1  # the FP16 model's logits are wrong (rel_l2 ~2.7)
    # no other node accounts for a tenth of it: each passes lowered alone
    assert all(r.lowered_alone_passes and r.score < 0.1 for r in sens.nodes[1:])
    assert sens.exclude == fp16.keep and sens.exclude_passes
    assert [r.name for r in sens.op_types][0] == "BatchNormalization"
    assert sens.trials <= 40 and sens.untried_lowered == sens.lowered - len(sens.nodes)


@pytest.mark.modelopt
def test_modelopt_patterns_select_exactly_the_exclusion_list(fp16: RepairRecord):
    """One pattern a line, matched by ModelOpt's own function (re.match, for quantization's and AutoCast's
    nodes_to_exclude) to exactly the listed nodes, no node whose name merely starts the same."""
    graph_utils = pytest.importorskip("modelopt.onnx.quantization.graph_utils", reason="pip install -e '.[modelopt]'")
    sens = fp16.sensitivity
    assert sens is not None and sens.exclude
    model = onnx.load(str(REFERENCE))
    patterns = Path(sens.files["modelopt"]).read_text().split()
    assert sorted(graph_utils.expand_node_names_from_patterns(model.graph, patterns)) == sorted(sens.exclude)
    model.graph.node[0].name = sens.exclude[0] + "_1"  # a name the unanchored pattern would match too
    assert sorted(graph_utils.expand_node_names_from_patterns(model.graph, patterns)) == sorted(sens.exclude)


def test_exclusion_lists_parse_as_each_tool_reads_them(fp16: RepairRecord):
    sens = fp16.sensitivity
    assert sens is not None
    model = onnx.load(str(REFERENCE))
    names = {n.name for n in model.graph.node}
    assert set(sens.exclude) <= names
    files = {k: Path(v) for k, v in sens.files.items()}
    # trtexec: --layerPrecisions=spec, spec ::= layerName":"precision[","spec] (trtexec --help); trtexec splits at
    # commas, then each entry at its last colon, and TensorRT's ONNX parser names layers after the ONNX nodes
    flags = files["trtexec"].read_text().split()
    spec = next(f for f in flags if f.startswith("--layerPrecisions="))
    assert re.fullmatch(r"--layerPrecisions=[^,]+:(fp32|fp16|bf16|int32|int8)(,[^,]+:(fp32|fp16|bf16|int32|int8))*",
                        spec)  # fmt: skip
    parsed = [entry.rsplit(":", 1) for entry in spec.split("=", 1)[1].split(",")]
    assert [n for n, _ in parsed] == sens.exclude and {p for _, p in parsed} == {"fp32"}
    assert "--precisionConstraints=obey" in flags
    # trtverify: a suite candidate recipe takes the keep-list, and the FP16 lowering keeps those nodes
    keep = yaml.safe_load(files["trtverify"].read_text())["keep"]
    assert keep == sens.exclude
    Candidate.model_validate({"from": "reference", "precision": "fp16", "keep": keep})
    made = to_fp16(model, keep)
    bn = next(n for n in made.graph.node if n.name == keep[0])
    assert not any(i.endswith("__fp16") for i in bn.input)


def test_modelopt_int8_candidate(tmp_path: Path):
    rec = run(tmp_path, "int8", MODELOPT_INT8, op_types=False)
    sens = rec.sensitivity
    assert sens is not None and rec.passed
    assert [r.name for r in sens.nodes[: len(rec.keep)]] == rec.keep == ["/features/post_bn/BatchNormalization"]
    assert sens.nodes[0].kept_alone_passes and sens.exclude == rec.keep and not sens.op_types


def test_bounds_say_what_was_not_tried(tmp_path: Path):
    rec = run(tmp_path, "fp16", suspects=3, max_trials=4)
    sens = rec.sensitivity
    assert sens is not None and sens.trials == 4 and sens.floor < 1e-3  # FP16 made here: all kept is FP32
    # the floor, then 3 suspects: the first has both trials, the second only kept alone, the third none; the rest are
    # beyond the bound
    assert len(sens.nodes) == 2 and sens.nodes[0].name == rec.keep[0]
    assert sens.nodes[1].kept_alone_passes is False and sens.nodes[1].lowered_alone_passes is None
    ran_out = [k for k, v in sens.not_tried.items() if "4 trials ran out" in v]
    beyond = [k for k, v in sens.not_tried.items() if v.startswith("beyond the bound of 3 suspects")]
    assert ran_out and beyond and sens.stopped and "4 trials" in sens.stopped


def test_command_line_writes_the_table_to_results_terminal_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    import json

    from tests.conftest import main_in_process

    np.savez(tmp_path / "rows.npz", input=np.concatenate([r["input"] for r in rows(2, 4)]))
    out = tmp_path / "out"
    argv = ["repair", str(REFERENCE), "--precision", "fp16", "--inputs", str(tmp_path / "rows.npz"), "--sensitivity",
            "--sensitivity-trials", "6", "--out", str(out)]  # fmt: skip
    res = main_in_process(argv, capsys, monkeypatch)
    assert res.code == 0, res.err
    stage = next(s for s in json.loads((out / "results.json").read_text())["stages"] if s["name"] == "repair")
    sens = stage["sensitivity"]
    assert sens["trials"] == 6 and sens["nodes"][0]["name"] == stage["keep"][0] and "sensitivity_s" in stage["timings"]
    assert re.search(r"1\s+/features/post_bn/BatchNormalization\s+\S+ passes", res.out)
    assert "exclusion list (passes: the top node kept alone passes): /features/post_bn/BatchNormalization" in res.out
    html = (out / "report.html").read_text()
    assert "Sensitivity: which nodes account for the output error" in html
    assert "modelopt_nodes_to_exclude.txt" in html and "repair seed: constant_saturated" in html


def test_hugging_face_bert_int8_error_sits_in_the_adds(tmp_path: Path):
    """A model made as users make theirs (transformers' BertModel exported by torch.onnx.export's defaults,
    tests/data/bert_mask/README.md), lowered to INT8 here: it passes with nothing kept, so the exclusion list is
    empty; the table still says where its error is: the Adds reading quantized values (lowered alone they cause
    nearly all of it), not the MatMuls."""
    ref = ROOT / "tests" / "data" / "bert_mask" / "bert_dynamo.onnx"
    with np.load(ROOT / "tests" / "data" / "bert_mask" / "inputs.npz", allow_pickle=False) as data:
        feeds = [{k: data[k][i : i + 1] for k in data.files} for i in range(len(data["input_ids"]))]
    rec = repair(ref, "int8", feeds, precision_checks("int8"), tmp_path / "out", method="minmax",
                 sensitivity=Options(suspects=3))  # fmt: skip
    sens = rec.sensitivity
    assert sens is not None and rec.passed and rec.keep == [] and sens.baseline_passes
    assert sens.exclude == [] and sens.exclude_passes is True
    types = {r.name: r for r in sens.op_types}
    assert set(types) == {"Add", "MatMul"} and sens.op_types[0].name == "Add"
    assert types["Add"].share_lowered > 0.8 and types["MatMul"].score < 0.2
    assert all(r.kept_alone_passes for r in sens.nodes) and len(sens.nodes) == 3  # each passes kept alone
    assert Path(sens.files["modelopt"]).read_text() == "" and "keep: []" in Path(sens.files["trtverify"]).read_text()


def test_suspects_from_a_layerwise_run_come_first_and_a_bad_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    import json

    from tests.conftest import main_in_process

    np.savez(tmp_path / "rows.npz", input=np.concatenate([r["input"] for r in rows(2, 4)]))
    common = [str(REFERENCE), "--inputs", str(tmp_path / "rows.npz")]
    lw = main_in_process(["layerwise", *common, str(MODELOPT_INT8), "--out", str(tmp_path / "lw")], capsys, monkeypatch)
    assert lw.code == 1  # ModelOpt's INT8 of this model fails: its FP16 rest clamps the BatchNorm's variance
    repair_argv = ["repair", *common, "--precision", "int8", "--candidate", str(MODELOPT_INT8), "--sensitivity",
                   "--sensitivity-suspects", "3", "--sensitivity-trials", "6"]  # fmt: skip
    res = main_in_process([*repair_argv, "--suspects-from", str(tmp_path / "lw" / "results.json"), "--out",
                           str(tmp_path / "out")], capsys, monkeypatch)  # fmt: skip
    assert res.code == 0, res.err
    stage = next(
        s for s in json.loads((tmp_path / "out" / "results.json").read_text())["stages"] if s["name"] == "repair"
    )
    whys = [r["why"] for r in stage["sensitivity"]["nodes"]]
    assert whys[0].startswith("layerwise: first divergence of fashion_bn_int8")
    assert all(w.startswith("layerwise: root cause #") for w in whys[1:]) and len(whys) == 3
    (tmp_path / "bad.json").write_text('{"stages": [{"name": "repair"}]}')
    bad = main_in_process([*repair_argv, "--suspects-from", str(tmp_path / "bad.json"), "--out",
                           str(tmp_path / "out2")], capsys, monkeypatch)  # fmt: skip
    assert bad.code == 2 and "bad.json: no layerwise stage" in bad.err


def test_names_no_tool_can_take_are_said():
    from trtverify.repair.sensitivity import unaddressable

    names = {"/a/Conv", "/b/Add,1"}
    out = unaddressable(["/a/Conv", "Conv_3", "/b/Add,1"], names)
    assert set(out) == {"Conv_3", "/b/Add,1"} and "unnamed" in out["Conv_3"] and "comma" in out["/b/Add,1"]
