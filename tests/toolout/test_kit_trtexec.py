"""The kit's trtexec files and command, for a model with several inputs (the Hugging Face BERT export of
tests/data/bert_mask: input_ids, attention_mask): trtexec reads ONE --loadInputs whose specs are
joined by commas (TensorRT's samples/common/sampleOptions.cpp: getAndDelOption, then splitToStringVec(list, ',')),
so a repeated flag would leave inputs random; --loadRefOutputs takes the same form (sampleInference.cpp
loadRefOutputsImpl reads each file as the output's raw bytes) and needs --accuracyThreshold."""

from __future__ import annotations

import json
import shlex

import numpy as np
import onnxruntime as ort

from tests.conftest import DATA, main_in_process

BERT = DATA / "bert_mask" / "bert_ts.onnx"


def test_kit_writes_one_load_inputs_flag_and_the_reference_outputs_for_trtexec(tmp_path, capsys, monkeypatch):
    kit = tmp_path / "kit"
    r = main_in_process(["capture", str(BERT), "--inputs", str(DATA / "bert_mask" / "inputs.npz"), "--samples", "1",
                         "--out", str(kit)], capsys, monkeypatch)  # fmt: skip
    assert r.code == 0, r.out + r.err
    manifest = json.loads((kit / "manifest.json").read_text())
    names = [i["name"] for i in manifest["inputs"]]
    assert len(names) == 2
    line = next(x for x in (kit / "README.md").read_text().splitlines() if x.strip().startswith("trtexec --onnx"))
    words = shlex.split(line)
    loads = [w for w in words if w.startswith("--loadInputs=")]
    assert len(loads) == 1 and all(f"'{n}':trtexec/{n}.bin" in loads[0] for n in names), loads
    refs = [w for w in words if w.startswith("--loadRefOutputs=")]
    assert len(refs) == 1 and "--accuracyThreshold=1e-3" in words
    # the files are the reference's outputs on feed 0, as ONNX Runtime computes them, raw bytes of their type
    feed = {n: np.fromfile(kit / f"trtexec/{n}.bin", dtype=i["dtype"]).reshape(i["shape"])
            for n, i in zip(names, manifest["inputs"])}  # fmt: skip
    session = ort.InferenceSession(str(BERT), providers=["CPUExecutionProvider"])
    outputs = session.get_outputs()
    want = session.run(None, feed)
    written = manifest["files"]["trtexec_reference_outputs"]
    assert set(written) == {o.name for o in outputs}
    for o, value in zip(outputs, want):
        got = np.fromfile(kit / written[o.name], dtype=value.dtype).reshape(value.shape)
        np.testing.assert_array_equal(got, value)
