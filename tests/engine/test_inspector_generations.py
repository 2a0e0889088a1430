"""Both IEngineInspector generations: TensorRT <= 10 (`Bindings`, `Format/Datatype`) and TensorRT 11 (`I/O Tensors`,
`Format` and `Datatype` apart). The TensorRT 11 fixture is the real `qat` export rewritten to the documented
schema (tests/data/engine_exports/trt11/make_trt11.py says how and why: no TensorRT 11 export could be captured)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from trtverify.engine.audit import audit
from trtverify.engine.diff import diff

DATA = Path(__file__).resolve().parents[1] / "data" / "engine_exports"
QAT, TRT11 = DATA / "qat", DATA / "trt11"
GRAPH11 = TRT11 / "resnet-qat-trt11.onnx.engine.graph.json"


def _copy(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "e"
    folder.mkdir()
    shutil.copy(TRT11 / "resnet-qat-trt11.onnx.engine.profile.json", folder)
    data = json.loads(GRAPH11.read_text())
    edit(data)
    (folder / GRAPH11.name).write_text(json.dumps(data))
    return folder


def test_a_tensorrt_11_export_audits_like_the_10x_export_it_was_written_from():
    old, new = audit([QAT]), audit([TRT11])
    assert (old.inspector, new.inspector) == ("TensorRT <= 10", "TensorRT 11")
    assert new.layers == old.layers == 37
    assert new.precisions == old.precisions and "INT8" in new.precisions
    assert new.reformat_layers == old.reformat_layers == 12
    assert new.total_ms == pytest.approx(old.total_ms)
    assert [r.precision for r in new.rows] == [r.precision for r in old.rows]
    assert [f.model_dump() for f in new.findings] == [f.model_dump() for f in old.findings]


def test_every_field_of_the_io_tensors():
    a = audit([TRT11])
    inp, out = a.io_tensors
    assert (inp.name, inp.mode, inp.dtype, inp.location, inp.shape_inference_io) == (
        "input.1",
        "Input",
        "Float",
        "Device",
        False,
    )
    assert inp.dimensions == [32, 3, 224, 224]
    (profile,) = inp.profiles
    assert profile.min == profile.opt == profile.max == [32, 3, 224, 224]
    assert profile.format == "Row major linear FP32 format (kLINEAR)"
    assert (out.name, out.mode, out.dimensions) == ("422", "Output", [32, 1000])
    old = audit([QAT]).io_tensors  # TensorRT <= 10: the names alone
    assert [t.name for t in old] == ["input.1", "422"] and all(t.mode is None and t.dtype is None for t in old)


def test_dynamic_profiles_are_kept_per_profile(tmp_path):
    def edit(d):
        t = d["I/O Tensors"][0]
        t["Dimensions"] = [-1, 3, 224, 224]
        t["ProfileInfo"] = [
            {"MinShape": [1, 3, 224, 224], "OptShape": [8, 3, 224, 224], "MaxShape": [32, 3, 224, 224], "Format": "f"},
            {"MinShape": [64, 3, 224, 224], "OptShape": [64, 3, 224, 224], "MaxShape": [64, 3, 224, 224]},
        ]

    a = audit([_copy(tmp_path, edit)])
    t = a.io_tensors[0]
    assert t.dimensions == [-1, 3, 224, 224]
    assert [(p.min[0], p.opt[0], p.max[0], p.format) for p in t.profiles] == [(1, 8, 32, "f"), (64, 64, 64, None)]


@pytest.mark.parametrize("key", ["Datatype", "DataType"])
def test_the_type_comes_from_the_split_datatype_not_the_format_text(tmp_path, key):
    """TensorRT 11's Format need not name the type: a layer's precision is its Datatype's."""

    def edit(d):
        for layer in d["Layers"]:
            for t in layer["Inputs"] + layer["Outputs"]:
                dtype = t.pop("Datatype")
                t[key] = dtype
                t["Format"] = "Row major linear format (kLINEAR)"  # no type in it

    a, ref = audit([_copy(tmp_path, edit)]), audit([QAT])
    assert [r.precision for r in a.rows] == [r.precision for r in ref.rows]


@pytest.mark.parametrize(
    "bad,message",
    [
        ({"I/O Tensors": "input.1"}, "'I/O Tensors' must be a list"),
        ({"I/O Tensors": [{"IOMode": "Input"}]}, "I/O Tensors[0]: not a tensor record with a Name"),
        ({"I/O Tensors": [{"Name": "x", "Dimensions": [1, "3"]}]}, "I/O Tensors[0].Dimensions"),
        ({"I/O Tensors": [{"Name": "x", "ProfileInfo": [{"MinShape": "1x3"}]}]}, "ProfileInfo[0].MinShape"),
        ({"Bindings": [1, 2]}, "'Bindings' must be a list of tensor names"),
    ],
)
def test_a_malformed_io_list_is_exit_2_naming_the_file_and_the_entry(tmp_path, bad, message):
    def edit(d):
        d.pop("I/O Tensors")
        d.update(bad)

    folder = _copy(tmp_path, edit)
    r = run_cli("engine", "audit", str(folder / GRAPH11.name))
    assert r.code == 2, r.out + r.err
    assert GRAPH11.name in r.err and message in r.err


def test_diff_across_the_two_generations_lines_up_every_layer():
    d = diff([QAT], [TRT11])
    assert d.total_a_ms == pytest.approx(d.total_b_ms)
    assert all(row.delta_ms == pytest.approx(0) for row in d.rows)
    assert sum(len(r.a_layers) for r in d.rows) == sum(len(r.b_layers) for r in d.rows) == 37
    assert not [f for f in d.findings if f.kind == "io_changed"]


def test_diff_names_an_io_tensor_whose_type_or_shape_changed(tmp_path):
    def edit(d):
        d["I/O Tensors"][1]["DataType"] = "Half"
        d["I/O Tensors"][0]["Dimensions"] = [16, 3, 224, 224]

    d = diff([TRT11], [_copy(tmp_path, edit)])
    (f,) = [f for f in d.findings if f.kind == "io_changed"]
    assert f.layers == ["input.1", "422"]
    assert "422: Float -> Half" in f.message and "input.1: [32, 3, 224, 224] -> [16, 3, 224, 224]" in f.message


def test_the_audit_prints_the_io_tensors_and_the_generation():
    r = run_cli("engine", "audit", str(TRT11))
    assert r.code == 0, r.out + r.err
    assert "TensorRT 11 inspector" in r.out
    assert "input.1 (Input, Float, [32, 3, 224, 224])" in r.out
