"""The INT8 candidate of torchvision's SSDlite (tests/data/torchvision/ssdlite.onnx) as a user makes it: ONNX Runtime's
`quantize_static` with its defaults (QDQ, per tensor, MinMax, asymmetric activations), calibrated on the two images
of tests/data/torchvision/inputs.npz. Nothing is shaped for the test: where its layerwise run diverges is whatever
those defaults give.

    /work/main/.venv/bin/python tests/reduce/data/make_int8.py

The versions are written to PROVENANCE.txt beside the model.
"""

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnxruntime.quantization import CalibrationDataReader, quantize_static

HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "data" / "torchvision"


class Rows(CalibrationDataReader):
    def __init__(self) -> None:
        images = np.load(SRC / "inputs.npz", allow_pickle=False)["image"]
        self.rows = iter([{"image": x} for x in images])

    def get_next(self) -> dict | None:
        return next(self.rows, None)


def main() -> None:
    quantize_static(str(SRC / "ssdlite.onnx"), str(HERE / "ssdlite_int8.onnx"), Rows())
    (HERE / "PROVENANCE.txt").write_text(
        "ssdlite_int8.onnx: made by tests/reduce/data/make_int8.py from tests/data/torchvision/ssdlite.onnx\n"
        f"onnxruntime {onnxruntime.__version__} (quantize_static, its defaults), onnx {onnx.__version__}, "
        f"numpy {np.__version__}\n"
        "command: /work/main/.venv/bin/python tests/reduce/data/make_int8.py\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    main()
