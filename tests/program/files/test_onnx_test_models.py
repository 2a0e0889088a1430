"""Models no one here wrote: the ONNX package's own test models (onnx/backend/test/data) through `layerwise M M`,
`convert M --precision fp16` and `layerwise M M16`, in this process (tests/program/files/onnx_sweep.py, which
bench/onnx_test_models.py also runs). No command may crash (exit 4) on any; a model ONNX Runtime cannot load is
exit 2 naming the file, with nothing written at -o; one it loads converts to a model it loads.

The default run sweeps a fixed subset holding every kind of model found in the full sweep (IR version 3 graphs
whose initializers are graph inputs, models ONNX Runtime cannot load, sequences, string inputs, a reference that
fails on generated inputs, a training-domain operator, a `light` ImageNet net); all 149 models: TRTVERIFY_FULL_SWEEP=1
(about 50 s of CPU; also `python bench/onnx_test_models.py`).
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest

from tests.program.files.onnx_sweep import FOLDERS, Row, data_root, models, sweep_model
from trtverify.convert.output import problems

SUBSET = {
    "pytorch-converted": ["test_Conv2d", "test_Embedding", "test_AvgPool1d", "test_BatchNorm2d_eval", "test_Softmax"],
    "pytorch-operator": ["test_operator_conv", "test_operator_mm", "test_operator_chunk"],
    "simple": [
        "test_sequence_model1",
        "test_expand_shape_model1",
        "test_strnorm_model_nostopwords_nochangecase",
        "test_gradient_of_add",
        "test_single_relu_model",
    ],
    "light": ["light_squeezenet"],
}
# why a command may stop with exit 2 on a model ONNX Runtime loads (the reason it prints)
EXIT2_REASONS = ("is a string tensor", "the reference must run on the inputs compared")


def _plugin_nodes(path: Path) -> bool:
    """Nodes of a domain ONNX Runtime has no kernels for (here: ai.onnx.preview.training's Gradient)."""
    m = onnx.load(str(path), load_external_data=False)
    return any(n.domain not in ("", "ai.onnx") for n in m.graph.node)


def _check(row: Row, tmp: Path) -> None:
    where = row.line()
    assert not row.crashed(), where
    assert not row.left_file, where
    self_, conv = row.results["self"], row.results["convert"]
    if not row.ort_loads and _plugin_nodes(row.path):
        # a node ONNX Runtime has no kernel for (a plugin): converted, checked by onnx.checker alone, said so; compared
        # where it can be, exit 1 naming the node without a reference
        assert conv.code == 0 and "its plugin nodes: " in conv.err, where
        assert self_.code == 1 and "no reference" in self_.err, where
        assert row.results["fp16"].code == 1 and "no reference" in row.results["fp16"].err, where
        return
    if not row.ort_loads:
        assert conv.code == 2 and str(row.path) in conv.err and "ONNX Runtime cannot load" in conv.err, where
        assert self_.code == 2, where
        assert "ONNX Runtime cannot load" in self_.err or "is a string tensor" in self_.err, where
        return
    assert conv.code == 0, where
    made = tmp / f"{row.folder}-{row.name}" / "fp16.onnx"
    assert problems(made).onnxruntime is None, where  # what convert wrote loads
    fp16 = row.results["fp16"]
    for res in (self_, fp16):
        assert res.code in (0, 1, 2), where
        if res.code == 2:
            assert any(r in res.err for r in EXIT2_REASONS), where
    if self_.code == 0:
        assert fp16.code in (0, 1), where
        if row.folder.startswith("pytorch"):  # single PyTorch ops: FP16 within the default FP16 checks
            assert fp16.code == 0, where
    else:  # the reference fails on generated inputs (2), or gives empty tensors there (1): so it does against FP16
        assert fp16.code == self_.code, where


def test_the_subset_names_models_that_exist():
    names = {(f, p.parent.name if f != "light" else p.stem) for f, p in models()}
    wanted = {(f, n) for f, ns in SUBSET.items() for n in ns}
    assert wanted <= names, sorted(wanted - names)
    assert len(names) == 149 and set(FOLDERS) == {f for f, _ in names}


@pytest.mark.parametrize("folder", FOLDERS)
def test_onnx_package_test_models(folder: str, tmp_path: Path):
    for f, path in models([folder]):
        name = path.parent.name if f != "light" else path.stem
        if name in SUBSET[folder]:
            _check(sweep_model(f, path, tmp_path), tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("TRTVERIFY_FULL_SWEEP") != "1", reason="all 149 models: TRTVERIFY_FULL_SWEEP=1")
def test_every_onnx_package_test_model(tmp_path: Path):
    assert data_root().is_dir()
    for folder, path in models():
        _check(sweep_model(folder, path, tmp_path), tmp_path)


def test_an_input_declared_without_a_shape(tmp_path: Path):
    """pytorch-converted/test_Conv2d (IR version 3) with its input's shape left out, as old exporters wrote inputs:
    onnx.checker rejects such a file below IR version 4 (`Field 'shape' of 'type' is required but missing`), ONNX
    Runtime loads it. convert writes the FP16 model, saying the reference fails the checker too; layerwise, which
    cannot generate an input of unknown rank, is exit 2 asking for --inputs."""
    from tests.program.files.onnx_sweep import call

    model = onnx.load(str(data_root() / "pytorch-converted" / "test_Conv2d" / "model.onnx"))
    model.graph.input[0].type.tensor_type.ClearField("shape")
    ref = tmp_path / "noshape.onnx"
    onnx.save(model, str(ref))
    out = tmp_path / "noshape16.onnx"
    r = call("convert", str(ref), "--precision", "fp16", "-o", str(out))
    assert r.code == 0 and "Field 'shape' of 'type' is required but missing" in r.err, r.err
    assert problems(out).onnxruntime is None
    r = call("layerwise", str(ref), str(out), "--out", str(tmp_path / "lw"))
    assert r.code == 2 and "input '0' has no declared shape; pass --inputs" in r.err, r.err
