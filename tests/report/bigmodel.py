"""A 5,000-node ONNX model for the report's graph view, written in well under a second with onnx.helper.

Residual MLP blocks named as torch.onnx.export names a module tree (`/stage3/block41/fc1/MatMul`): per block
fc1 MatMul -> Add -> Relu -> fc2 MatMul -> Add (residual) -> LayerNormalization, 6 nodes; 4 stages of 209 blocks
and a head make 5,018 nodes. Exporting such a model with torch.onnx.export takes minutes, which a test cannot
spend; the graph view only reads names, op types and edges, which this model has as an export would.
`plant()` (tests/stages/test_layerwise.py) scales one weight of a copy: the planted divergence.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

STAGES, BLOCKS, WIDTH = 4, 209, 8


def block_node(stage: int, block: int, part: str) -> str:
    return f"/stage{stage}/block{block}/{part}"


def write(path: Path, stages: int = STAGES, blocks: int = BLOCKS, seed: int = 0) -> int:
    """Write the model to `path`; returns its node count."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "input"
    ones, zeros = np.ones(WIDTH, np.float32), np.zeros(WIDTH, np.float32)
    inits += [numpy_helper.from_array(ones, "ln.gamma"), numpy_helper.from_array(zeros, "ln.beta")]
    for s in range(1, stages + 1):
        for b in range(1, blocks + 1):
            p = f"/stage{s}/block{b}"
            w1 = (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32)
            w2 = (rng.standard_normal((WIDTH, WIDTH)) * 0.3 / np.sqrt(WIDTH)).astype(np.float32)
            b1 = (rng.standard_normal(WIDTH) * 0.1).astype(np.float32)
            names = [f"stage{s}.block{b}.{k}" for k in ("fc1.weight", "fc1.bias", "fc2.weight")]
            inits += [numpy_helper.from_array(a, n) for a, n in zip((w1, b1, w2), names)]
            t = [f"{p}/{k}_output_0" for k in ("fc1/MatMul", "fc1/Add", "act/Relu", "fc2/MatMul", "Add", "norm")]
            nodes += [
                helper.make_node("MatMul", [x, names[0]], [t[0]], name=f"{p}/fc1/MatMul"),
                helper.make_node("Add", [t[0], names[1]], [t[1]], name=f"{p}/fc1/Add"),
                helper.make_node("Relu", [t[1]], [t[2]], name=f"{p}/act/Relu"),
                helper.make_node("MatMul", [t[2], names[2]], [t[3]], name=f"{p}/fc2/MatMul"),
                helper.make_node("Add", [x, t[3]], [t[4]], name=f"{p}/Add"),
                helper.make_node(
                    "LayerNormalization", [t[4], "ln.gamma", "ln.beta"], [t[5]], name=f"{p}/norm/LayerNormalization"
                ),
            ]
            x = t[5]
    wh = (rng.standard_normal((WIDTH, 4)) / np.sqrt(WIDTH)).astype(np.float32)
    inits.append(numpy_helper.from_array(wh, "head.weight"))
    nodes += [
        helper.make_node("MatMul", [x, "head.weight"], ["/head/MatMul_output_0"], name="/head/MatMul"),
        helper.make_node("Softmax", ["/head/MatMul_output_0"], ["probs"], name="/head/Softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "deep_mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [2, WIDTH])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [2, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests/report")
    model.ir_version = 8
    onnx.save(model, str(path))
    return len(nodes)
