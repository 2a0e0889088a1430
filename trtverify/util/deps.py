"""Import heavy libraries only where they are used, with the exact fix when they are missing."""

from __future__ import annotations

import importlib
from types import ModuleType

# module name -> (pip command that installs it, what it is for)
_FIXES: dict[str, str] = {
    "torch": "pip install torch   (CPU-only wheels: pip install torch --index-url https://download.pytorch.org/whl/cpu)",
    "onnxruntime": "pip install onnxruntime   (or onnxruntime-gpu for CUDA)",
    "onnx": "pip install onnx",
    "tensorrt": "pip install tensorrt polygraphy",
    "tensorrt_rtx": "pip install tensorrt-rtx polygraphy",
    "polygraphy": "pip install polygraphy",
}


def require(module: str, purpose: str) -> ModuleType:
    """Import `module` or raise MissingDependency naming the pip command that fixes it."""
    from trtverify.util.errors import MissingDependency

    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        fix = _FIXES.get(top, f"pip install {top}")
        raise MissingDependency(
            f"{purpose} needs the Python package '{top}', which cannot be imported ({exc}).", fix
        ) from exc
    if module.split(".")[0] == "onnxruntime":
        quiet_onnxruntime()
    return loaded


def quiet_onnxruntime() -> None:
    """Every ONNX Runtime session of this process logs errors only, those its own tools create included
    (quantize_static's calibration, onnxruntime.transformers): a constant-folding warning per node of a
    Q/DQ model on every repair evaluation says nothing the stage does not report itself."""
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)
