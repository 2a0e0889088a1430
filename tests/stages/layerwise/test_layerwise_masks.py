"""A Hugging Face BERT with an attention mask (tests/data/bert_mask, made by its make_bert.py with transformers'
defaults): the mask's fill is -inf in the TorchScript export, finfo(float32).min in the dynamo export and -65504
once converted to FP16. Each is its type's extreme: a saturated fill, equal by meaning (the Softmax after it makes
exact zeros on both sides), never a non-finite divergence. Real non-finite divergences still fail, saying which
side holds the non-finite values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.conftest import DATA, as_json, write_suite
from trtverify.cli.run import run_and_record
from trtverify.config.loader import load_suite
from trtverify.convert.fp16 import to_fp16
from trtverify.report.text import divergence_text
from trtverify.stages.layerwise.models import FirstDivergence

BERT = DATA / "bert_mask"
INPUTS = np.load(BERT / "inputs.npz", allow_pickle=False)
SEQ = INPUTS["attention_mask"].shape[1]
PADDED = int((INPUTS["attention_mask"] == 0).sum())  # padding tokens over the 4 rows (27)
WHERE0 = "/bert/encoder/layer.0/attention/self/Where_output_0"


def run(tmp_path: Path, reference: Path, candidate: Path | onnx.ModelProto) -> dict:
    if isinstance(candidate, onnx.ModelProto):
        onnx.save(candidate, str(tmp_path / "cand.onnx"))
        candidate = tmp_path / "cand.onnx"
    text = (
        f"name: masks\nreference_dir: refs\nmodels:\n  reference: {reference}\n  candidates:\n    cand: {candidate}\n"
        f"inputs:\n  file: {BERT / 'inputs.npz'}\nstages:\n  layerwise:\n    samples: 4\n"
    )
    results = run_and_record(load_suite(write_suite(tmp_path, text)), tmp_path / "out")
    return as_json(results)["stages"][0]


def rows_of(stage: dict) -> dict[str, dict]:
    return {r["tensor"]: r for r in stage["candidates"][0]["rows"]}


def with_fill(value: float) -> onnx.ModelProto:
    """The TorchScript export with its mask's -inf fill (a Constant per layer) set to `value`."""
    model = onnx.load(str(BERT / "bert_ts.onnx"))
    changed = 0
    for node in model.graph.node:
        if node.op_type == "Constant":
            arr = numpy_helper.to_array(node.attribute[0].t)
            if arr.dtype == np.float32 and arr.size == 1 and np.isneginf(arr).all():
                node.attribute[0].t.CopyFrom(numpy_helper.from_array(np.full_like(arr, value)))
                changed += 1
    assert changed == 2  # one per layer
    return model


def test_fp16_bert_mask_fill_saturated_to_65504_is_no_divergence(tmp_path: Path):
    """Was: `nonfinite_mismatch ... 2592 non-finite values where the reference's are finite` (backwards: the
    reference held the -inf) though the output agrees to 7e-4."""
    stage = run(tmp_path, BERT / "bert_ts.onnx", to_fp16(onnx.load(str(BERT / "bert_ts.onnx"))))
    assert stage["status"] == "passed", [c for c in stage["checks"] if not c["passed"]]
    rows = rows_of(stage)
    where = rows[WHERE0]
    # each padding token is masked for every one of the SEQ queries: -inf in the reference, -65504 in FP16
    assert where["saturated"] == PADDED * SEQ == where["ref_inf"] and "nonfinite_mismatch" not in where
    assert where["saturated_values"] == ["-inf", -65504.0] and where["passed"]
    # what follows decides: the Softmax gives exact zeros there on both sides, and agrees elsewhere
    softmax = rows["/bert/encoder/layer.0/attention/self/Softmax_output_0"]
    assert softmax["passed"] and "saturated" not in softmax and softmax["metrics"]["rel_l2"] < 1e-3
    assert rows["last_hidden_state"]["passed"] and rows["last_hidden_state"]["metrics"]["rel_l2"] < 2e-3
    note = next(n for n in stage["notes"] if "saturated fill" in n)
    assert WHERE0 in note and "reference -inf, candidate -65504" in note
    assert stage["candidates"][0]["first_divergence"] is None


@pytest.mark.parametrize("reference, candidate", [("bert_ts", "bert_dynamo"), ("bert_dynamo", "bert_ts")])
def test_torchscript_and_dynamo_fp32_exports_agree_both_ways(tmp_path: Path, reference: str, candidate: str):
    """-inf (TorchScript) against -3.4e38 (dynamo): both float32's extreme; they failed each other before."""
    stage = run(tmp_path, BERT / f"{reference}.onnx", BERT / f"{candidate}.onnx")
    assert stage["status"] == "passed", [c for c in stage["checks"] if not c["passed"]]
    saturated = [r for r in stage["candidates"][0]["rows"] if r.get("saturated")]
    assert saturated and all(r["passed"] for r in saturated)
    assert {v for r in saturated for v in r["saturated_values"]} == {"-inf", -float(np.finfo(np.float32).max)}
    assert rows_of(stage)["last_hidden_state"]["metrics"]["rel_l2"] < 1e-6


def test_fp16_of_the_dynamo_export_lints_no_saturated_mask_fill(tmp_path: Path):
    """finfo(float32).min converted to -65504: the conversion meant that; no 'keep this node in FP32', no
    'overflows to inf' for the fill's activation."""
    stage = run(tmp_path, BERT / "bert_dynamo.onnx", to_fp16(onnx.load(str(BERT / "bert_dynamo.onnx"))))
    assert stage["status"] == "passed", [c for c in stage["checks"] if not c["passed"]]
    kinds = {f["kind"] for f in stage["candidates"][0]["lint"]}
    assert not kinds & {"constant_saturated", "activation_overflow", "nonfinite_initializer"}, kinds
    assert any("saturated fill" in n and "candidate -65504" in n for n in stage["notes"])


def test_nan_where_the_mask_was_still_fails(tmp_path: Path):
    """A fill turned NaN: both sides non-finite but different at the Where, then NaN in the candidate alone."""
    stage = run(tmp_path, BERT / "bert_ts.onnx", with_fill(np.nan))
    assert stage["status"] == "failed"
    rows = rows_of(stage)
    where = rows[WHERE0]
    assert where["nonfinite_mismatch"] == PADDED * SEQ and where["ref_only_nonfinite"] == 0
    assert where["cand_only_nonfinite"] == 0 and not where["passed"]
    softmax = rows["/bert/encoder/layer.0/attention/self/Softmax_output_0"]
    assert softmax["cand_only_nonfinite"] > 0 and softmax["ref_only_nonfinite"] == 0
    fd = FirstDivergence.model_validate(stage["candidates"][0]["first_divergence"])
    assert fd.tensor == WHERE0 and "non-finite on both sides but different" in divergence_text(fd)


def test_a_finite_fill_against_the_references_inf_says_the_reference_holds_it(tmp_path: Path):
    """-10000 (transformers' fill before finfo.min) is no type's extreme: the reference's -inf there is a
    mismatch, on the reference's side."""
    stage = run(tmp_path, BERT / "bert_ts.onnx", with_fill(-10000.0))
    assert stage["status"] == "failed"
    where = rows_of(stage)[WHERE0]
    assert where["ref_only_nonfinite"] == where["nonfinite_mismatch"] == PADDED * SEQ
    assert where["cand_only_nonfinite"] == 0
    fd = FirstDivergence.model_validate(stage["candidates"][0]["first_divergence"])
    words = divergence_text(fd)
    assert f"{PADDED * SEQ} non-finite values in the reference where the candidate's are finite" in words, words


def test_fp16_overflow_where_the_reference_is_finite_still_fails(tmp_path: Path):
    """The embeddings' LayerNorm scaled x1e5: about 3e5 in FP32 (finite, far from float32's extreme), inf in FP16."""
    ref = onnx.load(str(BERT / "bert_ts.onnx"))
    gamma = next(t for t in ref.graph.initializer if t.name == "bert.embeddings.LayerNorm.weight")
    gamma.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(gamma) * np.float32(1e5), gamma.name))
    onnx.save(ref, str(tmp_path / "ref.onnx"))
    stage = run(tmp_path, tmp_path / "ref.onnx", to_fp16(ref))
    assert stage["status"] == "failed"
    fd = FirstDivergence.model_validate(stage["candidates"][0]["first_divergence"])
    assert fd.tensor == "/bert/embeddings/LayerNorm/LayerNormalization_output_0"
    assert fd.cand_only_nonfinite and not fd.ref_only_nonfinite
    assert "non-finite values in the candidate where the reference's are finite" in divergence_text(fd)
    kinds = {f["kind"] for f in stage["candidates"][0]["lint"]}
    assert "constant_saturated" in kinds  # a weight beyond 65504 clamped: a real saturation, still reported


def test_repair_of_the_fp16_bert_keeps_nothing():
    """Repair used to keep both mask Where nodes in FP32 to get rid of the 'non-finite' -65504 fill; the FP16
    model passes as it is (the checks are `trtverify repair --precision fp16`'s defaults)."""
    from trtverify.config.checks import Check
    from trtverify.repair.search import search

    rows = [{k: INPUTS[k][i : i + 1] for k in INPUTS.files} for i in range(4)]
    checks = [Check(metric="rel_l2", max=0.1), Check(metric="cosine", min=0.999)]
    result = search(BERT / "bert_ts.onnx", "fp16", rows, checks)
    assert result.before.passed and not result.before.nonfinite, result.before.failed
    assert result.passed and result.keep == [] and len(result.steps) == 1
