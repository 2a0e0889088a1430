"""docs/making-candidates.md's asymmetric INT8 model: ONNX Runtime's quantize_static with its defaults
(QDQ format, asymmetric uint8 activations), calibrated on an .npz keyed by input names.

    python make_int8_asym.py model_fp32.onnx calib.npz model_int8_asym.onnx
"""

import sys

import numpy as np
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static


class Rows(CalibrationDataReader):
    def __init__(self, path: str):
        data = np.load(path)
        self.rows = iter([{k: data[k][i : i + 1] for k in data.files} for i in range(len(data[data.files[0]]))])

    def get_next(self):
        return next(self.rows, None)


if __name__ == "__main__":
    model, calib, out = sys.argv[1:4]
    quantize_static(model, out, Rows(calib), quant_format=QuantFormat.QDQ)
