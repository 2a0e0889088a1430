"""TensorRT <= 10 INT8 calibration: the suite's `calibration_algorithm` selects the TensorRT calibrator class that
Polygraphy's `Calibrator` derives from (its documented `BaseClass`, `quantile`, `regression_cutoff` arguments).
TensorRT cannot be installed here: `trt` is a stand-in namespace holding the four class names TensorRT's Python API
exports (IInt8EntropyCalibrator2, IInt8EntropyCalibrator, IInt8MinMaxCalibrator, IInt8LegacyCalibrator)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from trtverify.backends.tensorrt_support import CALIBRATORS, calibrator_options
from trtverify.config.backends import TensorRTOptions

TRT = SimpleNamespace(**{name: type(name, (), {}) for name in CALIBRATORS.values()})  # stand-in, see above


@pytest.mark.parametrize("algorithm", ["entropy2", "entropy", "minmax", "legacy"])
def test_each_algorithm_selects_its_tensorrt_calibrator(algorithm: str) -> None:
    o = TensorRTOptions(precisions=["int8"], calibration_algorithm=algorithm)
    kwargs = calibrator_options(TRT, o)
    assert kwargs == {"BaseClass": getattr(TRT, CALIBRATORS[algorithm])}
    assert kwargs["BaseClass"].__name__.startswith("IInt8")


def test_no_algorithm_leaves_polygraphys_default_and_legacy_takes_its_parameters() -> None:
    assert calibrator_options(TRT, TensorRTOptions(precisions=["int8"])) == {}
    o = TensorRTOptions(precisions=["int8"], calibration_algorithm="legacy", calibration_quantile=0.9999,
                        calibration_regression_cutoff=1.0)  # fmt: skip
    assert calibrator_options(TRT, o) == {"BaseClass": TRT.IInt8LegacyCalibrator, "quantile": 0.9999,
                                          "regression_cutoff": 1.0}  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"calibration_algorithm": "minmax", "precisions": ["fp16"]}, "go with precisions: \\[int8\\]"),
        ({"calibration_algorithm": "percentile", "precisions": ["int8"]}, "Input should be"),
        ({"calibration_quantile": 0.99, "precisions": ["int8"]}, "go with calibration_algorithm: legacy"),
        ({"calibration_quantile": 0.99, "calibration_algorithm": "minmax", "precisions": ["int8"]}, "legacy"),
    ],
)
def test_calibration_options_that_cannot_apply_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TensorRTOptions(**kwargs)
