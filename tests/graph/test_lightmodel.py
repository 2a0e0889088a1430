"""Weights stay in their files: the weightless graph, ONNX Runtime over the original bytes, the lint's reads."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.config.backends import OnnxRuntimeOptions
from trtverify.graph.lightmodel import LightModel
from trtverify.graph.onnxwire import weightless
from trtverify.lint.reference_constants import _classify, _roundings, _suspects


def _mlp(dtype=np.float32, hidden: int = 64, seed: int = 0) -> onnx.ModelProto:
    """x -> MatMul -> Add -> Relu -> MatMul (weights of `dtype`; an FP16 model casts its input and output)."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((hidden, 4 * hidden)) / 8).astype(dtype)
    b1 = (rng.standard_normal(4 * hidden) / 100).astype(dtype)
    w2 = (rng.standard_normal((4 * hidden, hidden)) / 16).astype(dtype)
    narrow = dtype == np.float16
    nodes = [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16)] if narrow else []
    src = "x16" if narrow else "x"
    nodes += [
        helper.make_node("MatMul", [src, "w1"], ["h"], name="up"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="bias"),
        helper.make_node("Relu", ["hb"], ["a"], name="relu"),
        helper.make_node("MatMul", ["a", "w2"], ["y16" if narrow else "y"], name="down"),
    ]
    if narrow:
        nodes.append(helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT))
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"))]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, hidden])],
        initializer=inits,
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    m.ir_version = 8
    return m


def _feed(hidden: int = 64) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).standard_normal((2, hidden)).astype(np.float32)}


@pytest.mark.parametrize("external", [False, True], ids=["weights-in-the-file", "external-data"])
def test_the_weightless_graph_holds_no_weight_and_runs_like_the_file(tmp_path, external):
    import onnxruntime as ort

    path = tmp_path / "m.onnx"
    onnx.save(_mlp(), str(path), save_as_external_data=external, location="m.onnx.data", size_threshold=1024)
    model, folder = weightless(path)
    weights = sum(np.prod(t.dims) * 4 for t in _mlp().graph.initializer)
    assert model.ByteSize() < weights / 20  # the graph alone: no weight was copied into it
    big = [t for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert {t.name for t in big} == {"w1", "w2", "b1"}  # each >= 1 KiB
    where = {e.value for t in big for e in t.external_data if e.key == "location"}
    assert where == ({"m.onnx.data"} if external else {"m.onnx"})  # the bytes where they already are
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, _feed())[0]
    with OnnxRuntimeBackend(path, OnnxRuntimeOptions()) as b:
        got = b.infer(_feed())["y"]
        exposed = b.expose(["h", "a"])
        outs = b.infer(_feed())
    assert exposed == ["h", "a"]
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(outs["y"], expected)
    assert set(outs) == {"y", "h", "a"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.onnx"] + (["m.onnx.data"] if external else []))


def test_an_fp16_model_with_external_weights_is_emulated_over_its_own_bytes(tmp_path):
    """The emulated twin widens external FP16 weights with a Cast when it runs: the same numbers as converting
    them in the graph (the emulation of a model whose weights sit in the .onnx file)."""
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    m = _mlp(np.float16)
    onnx.save(m, str(inside / "m.onnx"))
    onnx.save(m, str(outside / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    outs = []
    for folder in (inside, outside):
        with OnnxRuntimeBackend(folder / "m.onnx", OnnxRuntimeOptions()) as b:
            assert b.emulated is not None
            b.expose(["a"])
            outs.append(b.infer(_feed()))
    assert outs[0]["a"].dtype == np.float16  # exposed as the candidate holds it
    for k in ("y", "a"):
        np.testing.assert_array_equal(outs[0][k], outs[1][k])


def test_external_data_that_leaves_the_folder_is_refused_before_a_byte_is_read(tmp_path):
    m = _mlp()
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path), save_as_external_data=True, location="m.data", size_threshold=1024)
    loaded = onnx.load(str(path), load_external_data=False)
    for t in loaded.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../../etc/passwd"
    onnx.save(loaded, str(path))
    with pytest.raises(ValueError, match="points outside the model's folder"):
        weightless(path)
    with pytest.raises(ValueError, match="points outside"):
        LightModel(path)


def test_the_lint_reads_external_weights_it_judges(tmp_path):
    """A saturated BatchNorm-like constant in external data is still found (read memory-mapped from its file)."""
    from trtverify.lint.linter import lint_candidate

    m = _mlp()
    ref = tmp_path / "ref"
    cand = tmp_path / "cand"
    ref.mkdir()
    cand.mkdir()
    onnx.save(m, str(ref / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    c = _mlp(np.float16)
    w2 = numpy_helper.to_array(next(t for t in c.graph.initializer if t.name == "w2")).copy()
    w2[0, :3] = 0  # flushed to zero: the reference's values are ~0.06
    for i, t in enumerate(c.graph.initializer):
        if t.name == "w2":
            c.graph.initializer[i].CopyFrom(numpy_helper.from_array(w2, "w2"))
    onnx.save(c, str(cand / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    found = lint_candidate(cand / "m.onnx", reference=ref / "m.onnx", strongly_typed=True)
    kinds = {(f.kind, f.tensor) for f in found}
    assert ("constant_flushed", "w2") in kinds
    assert not any(f.tensor == "w1" and f.kind.startswith("constant_") for f in found)  # plainly rounded


_F32 = st.floats(width=32, allow_nan=True, allow_infinity=True)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(_F32, min_size=1, max_size=40),
    tweak=st.lists(st.tuples(st.integers(0, 39), st.sampled_from([0.0, 1.001, 0.5, 65504.0, -1.0, 6e-8])), max_size=3),
)
def test_the_fast_path_never_hides_what_the_full_comparison_reports(values, tweak):
    """`_suspects` sets aside every value `_classify` reports: the full comparison of the whole weight and the
    comparison of its suspects alone give the same counts, extremes and spans."""
    r = np.array(values, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        c = r.astype(np.float16)
        for i, how in tweak:
            if i < c.size:
                c[i] = np.float16(how) if how in (0.0, 65504.0, -1.0, 6e-8) else c[i] * np.float16(how)
    rounding = _roundings()[TensorProto.FLOAT16]
    suspects = _suspects(c, r, rounding)
    if suspects is not None:
        cs, rs, rmax = suspects
        with np.errstate(over="ignore", invalid="ignore"):
            assert _classify(cs, rs, rounding, rmax) == _classify(c, r, rounding)


def test_the_fast_path_on_a_big_weight_keeps_flushes_that_other_changes_would_cancel_in_a_count():
    """A weight big enough for ONNX Runtime's cast (trtverify.util.halfcast): the converter's clamp of a tiny value
    to the smallest subnormal is a plain conversion's only suspect, and a value rounded to zero exactly is still
    reported where other changes leave the number of non-zeros as it was."""
    rng = np.random.default_rng(7)
    size = 300_000

    def away_from_zero(scale: float) -> np.ndarray:
        return (rng.choice([-1.0, 1.0], size) * rng.uniform(0.1 * scale, scale, size)).astype(np.float32)

    rounding = _roundings()[TensorProto.FLOAT16]
    r = away_from_zero(1e-3)
    r[10] = 1e-9  # rounds to 0 in float16: the converter clamps it to 6e-8
    c = r.astype(np.float16)
    c[10] = np.float16(6e-8)
    cs, rs, rmax = _suspects(c, r, rounding)
    assert cs.size == 1 and rmax == float(np.abs(r).max())
    assert _classify(cs, rs, rounding, rmax) == _classify(c, r, rounding)
    assert all(n == 0 for n, *_ in _classify(c, r, rounding).values())  # a clamp beside weights of 1e-3: nothing

    r = away_from_zero(1e-5)  # a small weight: a flush of 2.5e-8 exceeds the rounding of its largest value
    r[30] = r[40] = 0
    r[50] = 2.5e-8  # under half the smallest subnormal: float16 rounds it to zero
    c = r.astype(np.float16)
    c[20] = 0  # flushed: one non-zero fewer than the reference
    c[30] = c[40] = 1  # two more: with 50's flush, as many non-zeros as the reference
    cs, rs, rmax = _suspects(c, r, rounding)
    full = _classify(c, r, rounding)
    assert _classify(cs, rs, rounding, rmax) == full
    assert full["constant_flushed"][0] == 2 and full["constant_changed"][0] == 2
