"""Write the TensorRT 11 inspector form of the real `qat` export (test data; run from this folder).

No TensorRT 11 engine export could be captured here (TensorRT cannot execute on this workplace's machines;
see docs/tensorrt.md). This rewrites the real TensorRT 8.x export `../qat/resnet-qat.onnx.engine.graph.json`
(NVIDIA's TREx example, Apache-2.0) into the schema TensorRT 11's IEngineInspector writes:

- `Bindings` (a list of names) becomes `I/O Tensors`, a list of objects with `Name`, `IOMode`, `DataType`,
  `Dimensions`, `Location`, `IsShapeInferenceIO` and `ProfileInfo` (`MinShape`, `OptShape`, `MaxShape`,
  `Format` per optimisation profile), exactly as NVIDIA's "Migrating IEngineInspector Usage from TensorRT 10.x
  to 11.x" documents it (docs.nvidia.com/deeplearning/tensorrt/11.0.0/api/migration/
  tensorrt-10x-to-11x-IEngineInspector.html);
- each layer input's and output's combined `Format/Datatype` is split into `Format` and `Datatype`, the keys
  NVIDIA's own TensorRT 11.1 OSS code reads (the migration guide names the split, "Format/DataType"; its
  example of it could not be retrieved here, so the reader also accepts `DataType`).

Everything else (names, layer types, tactics, weights) is the real export, unchanged.
Usage: python make_trt11.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "qat" / "resnet-qat.onnx.engine.graph.json"
TARGET = HERE / "resnet-qat-trt11.onnx.engine.graph.json"

# TensorRT's DataType names, as the inspector writes them
TYPES = (
    ("int8", "Int8"),
    ("fp16", "Half"),
    ("half", "Half"),
    ("int32", "Int32"),
    ("fp32", "Float"),
    ("float", "Float"),
)


def split(tensor: dict) -> dict:
    out = {k: v for k, v in tensor.items() if k != "Format/Datatype"}
    combined = str(tensor.get("Format/Datatype", ""))
    low = combined.lower()
    out["Format"] = combined
    out["Datatype"] = next((name for key, name in TYPES if key in low), "Float")
    return out


def main() -> None:
    data = json.loads(SOURCE.read_text())
    layers = data["Layers"]
    for layer in layers:
        for key in ("Inputs", "Outputs"):
            layer[key] = [split(t) for t in layer.get(key, [])]
    first_in = next(t for t in layers[0]["Inputs"])
    last_out = layers[-1]["Outputs"][0]
    io = []
    for name, mode, ref in zip(data["Bindings"], ("Input", "Output"), (first_in, last_out)):
        dims = ref["Dimensions"]
        io.append({
            "Name": name,
            "IOMode": mode,
            "DataType": "Float",
            "Dimensions": dims,
            "Location": "Device",
            "IsShapeInferenceIO": False,
            "ProfileInfo": [{"MinShape": dims, "OptShape": dims, "MaxShape": dims,
                             "Format": "Row major linear FP32 format (kLINEAR)"}],
        })  # fmt: skip
    out = {"Layers": layers, "I/O Tensors": io}
    TARGET.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {TARGET.name}: {len(layers)} layers, {len(io)} I/O tensors")


if __name__ == "__main__":
    main()
