"""Write the plugin fixtures of the engine audit and diff (test data; run from this folder).

No engine with a plugin could be built or profiled here (TensorRT cannot run on this workplace's machines; see
docs/tensorrt.md), and no public export with a plugin layer and its profile was found. So two real exports are
rewritten to hold one, the way TensorRT lays a plugin out; everything not named below is the real file, unchanged.

1. `fp16-plugin/`: the real FP16 ResNet export of `../fp16/` (trtexec --exportLayerInfo with
   --profilingVerbosity=detailed and --exportProfile, TensorRT 8.x, A100; NVIDIA's TREx example, Apache-2.0) with a
   plugin between `Add_11` and `Relu_12`: an identity plugin (`IdentityConv_0`, named after the IPluginV2IOExt
   example plugin of github.com/leimao/TensorRT-Custom-Plugin-Example, which accepts linear FP32 only). The real
   fused layer `Conv_10 + Add_11 + Relu_12` becomes what TensorRT builds around such a plugin:
   `Conv_10 + Add_11` (the real convolution record, its ReLU taken off), a Reformat to linear FP32 named for the
   plugin, the plugin layer (LayerType `PluginV2`: TensorRT's name of IPluginV2 layers, as its verbose build log
   writes them, `Layer(PluginV2): ...`), a Reformat back to the convolutions' FP16 format, and the ReLU alone as
   TensorRT 8 names a pointwise layer (`PWN(Relu_12)`, LayerType `PointWiseV2`). The new tensors' names are
   invented (`onnx::IdentityConv_137`, `onnx::Relu_138`); the layer feeding them and the one reading `input.40`
   are the real ones.
   Times (averageMs, count 1 as in the real profile): `Conv_10 + Add_11` keeps the fused layer's 0.054272 ms; the
   two Reformats and the plugin (a device copy) each move the same 32x64x56x56 tensor, so each takes the real
   input Reformat's time (0.080896 ms for 32x3x224x224 FP32 -> FP16) scaled by the element count (x 4/3):
   0.107861 ms; `PWN(Relu_12)` reads and writes FP16, 3/4 of that: 0.080896 ms. Percentages are recomputed.
2. `uvit-plugin.log`: the real `--dumpProfile` table of `../../trtexec_logs/08_trt86_profile_columns_uvit_trtllm2.log`
   (a U-ViT built with TensorRT-LLM's layer names, TensorRT 8.6, 41 iterations) whose one Myelin region
   `{ForeignNode[UViTNet/CONSTANT_8...UViTNet/ELEMENTWISE_DIV_0]}` (81.6096 ms) is split by a plugin named as
   TensorRT-LLM names plugin layers (`UViTNet/nnet/mid_block/attn/PLUGIN_V2_0`): region 1 ends at
   `UViTNet/nnet/mid_block/attn/SHUFFLE_2`, region 2 starts at `UViTNet/nnet/mid_block/attn/proj/MATRIX_MULTIPLY_0`
   (names invented in TensorRT-LLM's scheme), with a Reformat named for the plugin on each side. The times are
   invented to show the seed case (an almost empty plugin whose split costs more than its kernel): regions
   40.1904 and 45.8113 ms, plugin 0.0105 ms, each Reformat 0.9871 ms; the region's real input and output
   reformats go with region 1 and region 2. A names-only table: the plugin is told by its name.

Usage: python make_plugin.py
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
FP16 = HERE.parent / "fp16"
UVIT = HERE.parent.parent / "trtexec_logs" / "08_trt86_profile_columns_uvit_trtllm2.log"
OUT = HERE / "fp16-plugin"
PLUGIN = "IdentityConv_0"
FUSED = "Conv_10 + Add_11 + Relu_12"
COPY_MS = round(0.080896 * (32 * 64 * 56 * 56) / (32 * 3 * 224 * 224), 6)  # 0.107861
RELU_MS = round(COPY_MS * 0.75, 6)
FP16_16 = "Channel major FP16 format where channel % 16 == 0"
LINEAR_FP32 = "Row major linear FP32"


def _tensor(name: str, fmt: str) -> dict:
    return {"Name": name, "Location": "Device", "Dimensions": [32, 64, 56, 56], "Format/Datatype": fmt}


def _reformat(name: str, source: str, target: str, src_fmt: str, dst_fmt: str) -> dict:
    return {"Name": name, "LayerType": "Reformat", "Inputs": [_tensor(source, src_fmt)],
            "Outputs": [_tensor(target, dst_fmt)], "ParameterType": "Reformat", "Origin": "REFORMAT",
            "TacticValue": "0x00000000000003e8"}  # fmt: skip


def rewrite_layers(layers: list[dict]) -> list[dict]:
    at = next(i for i, layer in enumerate(layers) if layer["Name"] == FUSED)
    before = layers[at - 1]  # the real NoOp copy node into the fused layer
    assert before["Name"] == f"Reformatting CopyNode for Input Tensor 0 to {FUSED}"
    conv_name = "Conv_10 + Add_11"
    copy_in = copy.deepcopy(before)
    copy_in["Name"] = f"Reformatting CopyNode for Input Tensor 0 to {conv_name}"
    copy_in["Outputs"][0]["Name"] = f"Reformatted Input Tensor 0 to {conv_name}"
    conv = copy.deepcopy(layers[at])
    conv["Name"] = conv_name
    conv["Inputs"][0]["Name"] = f"Reformatted Input Tensor 0 to {conv_name}"
    conv["Outputs"][0]["Name"] = "onnx::IdentityConv_137"
    conv.update({"Activation": "NONE", "HasReLU": 0})
    to_plugin = _reformat(f"Reformatting CopyNode for Input Tensor 0 to {PLUGIN}", "onnx::IdentityConv_137",
                          f"Reformatted Input Tensor 0 to {PLUGIN}", FP16_16, LINEAR_FP32)  # fmt: skip
    plugin = {"Name": PLUGIN, "LayerType": "PluginV2",
              "Inputs": [_tensor(f"Reformatted Input Tensor 0 to {PLUGIN}", LINEAR_FP32)],
              "Outputs": [_tensor("onnx::Relu_138", LINEAR_FP32)], "TacticValue": "0x0000000000000000"}  # fmt: skip
    relu_name = "PWN(Relu_12)"
    from_plugin = _reformat(f"Reformatting CopyNode for Input Tensor 0 to {relu_name}", "onnx::Relu_138",
                            f"Reformatted Input Tensor 0 to {relu_name}", LINEAR_FP32, FP16_16)  # fmt: skip
    relu = {"Name": relu_name, "LayerType": "PointWiseV2",
            "Inputs": [_tensor(f"Reformatted Input Tensor 0 to {relu_name}", FP16_16)],
            "Outputs": [_tensor(layers[at]["Outputs"][0]["Name"], FP16_16)], "ParameterType": "PointWise",
            "ParameterSubType": "PointWiseExpression", "NbOperations": 1,
            "Operations": ["const auto var0 = pwgen::iMax(arg0, literal0);"],
            "TacticValue": "0x0000000000000001"}  # fmt: skip
    return layers[: at - 1] + [copy_in, conv, to_plugin, plugin, from_plugin, relu] + layers[at + 1 :]


def rewrite_profile(rows: list[dict]) -> list[dict]:
    times = {r["name"]: r["averageMs"] for r in rows[1:]}
    new = {
        "Reformatting CopyNode for Input Tensor 0 to Conv_10 + Add_11": times[f"Reformatting CopyNode for Input "
                                                                              f"Tensor 0 to {FUSED}"],
        "Conv_10 + Add_11": times[FUSED],
        f"Reformatting CopyNode for Input Tensor 0 to {PLUGIN}": COPY_MS,
        PLUGIN: COPY_MS,
        "Reformatting CopyNode for Input Tensor 0 to PWN(Relu_12)": COPY_MS,
        "PWN(Relu_12)": RELU_MS,
    }  # fmt: skip
    names = [r["name"] for r in rows[1:]]
    at = names.index(FUSED)
    order = names[: at - 1] + list(new) + names[at + 1 :]
    times.update(new)
    total = sum(times[n] for n in order)
    return [rows[0]] + [
        {"name": n, "timeMs": times[n], "averageMs": times[n], "medianMs": times[n],
         "percentage": round(100.0 * times[n] / total, 5) or 0} for n in order
    ]  # fmt: skip


def write_profile(path: Path, rows: list[dict]) -> None:
    """In trtexec's own layout: one record a line, a comma leading each after the first."""
    lines = ["[", "  " + json.dumps(rows[0]).replace('"count": ', '"count" : ').replace("{", "{ ").replace("}", " }")]
    for r in rows[1:]:
        fields = ", ".join(f'"{k}" : {json.dumps(v)}' for k, v in r.items())
        lines.append(", { " + fields + " }")
    path.write_text("\n".join(lines + ["]"]) + "\n")


def write_uvit(path: Path) -> None:
    src = UVIT.read_text().splitlines()
    prefix = src[0][: src[0].index("] [I] ") + len("] [I] ")]
    region = "{ForeignNode[UViTNet/CONSTANT_8...UViTNet/ELEMENTWISE_DIV_0]}"
    first = "{ForeignNode[UViTNet/CONSTANT_8...UViTNet/nnet/mid_block/attn/SHUFFLE_2]}"
    second = "{ForeignNode[UViTNet/nnet/mid_block/attn/proj/MATRIX_MULTIPLY_0...UViTNet/ELEMENTWISE_DIV_0]}"
    plugin = "UViTNet/nnet/mid_block/attn/PLUGIN_V2_0"
    iterations = 41
    rows: list[tuple[float, float, str]] = []  # (avg, median, name)
    for line in src[2:]:
        parts = line[len(prefix) :].split(None, 4)
        avg, median, name = float(parts[1]), float(parts[2]), parts[4]
        if name == "Total":
            break
        if name == region:
            copies = (f"Reformatting CopyNode for {side} Tensor 0 to {plugin}" for side in ("Input", "Output"))
            to_plugin, from_plugin = copies
            rows += [(40.1904, 40.1904, first), (0.9871, 0.9871, to_plugin), (0.0105, 0.0105, plugin),
                     (0.9871, 0.9871, from_plugin), (45.8113, 45.8113, second)]  # fmt: skip
            continue
        if name.startswith("Reformatting CopyNode for Output Tensor 0 to " + region):
            name = name.replace(region, second)
        rows.append((avg, median, name.replace(region, first)))
    total = sum(r[0] for r in rows)
    out = src[:2]
    for avg, median, name in rows + [(total, sum(r[1] for r in rows), "Total")]:
        out.append(f"{prefix}{avg * iterations:11.2f}{avg:13.4f}{median:13.4f}{100.0 * avg / total:10.1f}   {name}")
    path.write_text("\n".join(out) + "\n")


def main() -> None:
    OUT.mkdir(exist_ok=True)
    info = json.loads((FP16 / "resnet.onnx.engine.graph.json").read_text())
    info["Layers"] = rewrite_layers(info["Layers"])
    (OUT / "resnet-plugin.onnx.engine.graph.json").write_text(json.dumps(info, indent=1) + "\n")
    profile = json.loads((FP16 / "resnet.onnx.engine.profile.json").read_text())
    write_profile(OUT / "resnet-plugin.onnx.engine.profile.json", rewrite_profile(profile))
    write_uvit(HERE / "uvit-plugin.log")
    print(f"wrote {OUT.name}/ ({len(info['Layers'])} layers) and uvit-plugin.log")


if __name__ == "__main__":
    main()
