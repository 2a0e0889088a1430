"""Float32 <-> float16 casts of big arrays through ONNX Runtime's Cast kernel.

numpy converts float16 one value at a time (about 3 ns a value each way on this project's x86 CI, whose CPU has
F16C); ONNX Runtime's Cast uses the CPU's vector conversion (0.2-0.4 ns a value on 64K values and more). Both
round to nearest even and keep inf and signed zero; the one difference is a signalling NaN, which ONNX Runtime
quiets as the hardware does (numpy keeps its payload): a NaN stays a NaN of the same sign. The first use checks
ONNX Runtime against numpy on every rounding case of a probe (ties, subnormals, the overflow edge, NaNs) and
keeps numpy where they differ or where ONNX Runtime cannot be loaded. All 2^32 float32 bit patterns and all
2^16 float16 ones agreed this way on this project's CI machine (bench/halfcast_exhaustive.py).

Arrays under MIN_SIZE values go to numpy: a session run costs about 5 us.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

MIN_SIZE = 1 << 15

_lock = threading.Lock()
_sessions: dict[tuple[str, str], Any] = {}  # (from, to) -> session, or None where the fast path is off


def _probe() -> np.ndarray:
    """float32 values at every rounding case of the float16 conversion."""
    bits = []
    for exp in range(96, 160):  # float16's subnormals (float32 exponent 103..) to beyond its largest (142)
        for mant in (0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FF000, 0x7FEFFF, 0x7FFFFF, 0x5555AA):
            bits.append((exp << 23) | mant)
    bits += [0, 0x7F800000, 0x7FC00000, 0x7F800001, 0x7FC12345, 0x7FFFFFFF, 0x00000001, 0x007FFFFF]
    u = np.array(bits, dtype=np.uint32)
    u = np.concatenate([u, u | np.uint32(0x80000000)])
    return np.resize(u, MIN_SIZE).view(np.float32)  # one whole fast-path call


def _session(src: str, dst: str) -> Any:
    key = (src, dst)
    if key in _sessions:
        return _sessions[key]
    with _lock:
        if key not in _sessions:
            _sessions[key] = _make(src, dst)
    return _sessions[key]


def _make(src: str, dst: str) -> Any:
    try:
        import onnx
        import onnxruntime as ort
        from onnx import helper

        from trtverify.util.deps import quiet_onnxruntime

        quiet_onnxruntime()
        types = {"float32": onnx.TensorProto.FLOAT, "float16": onnx.TensorProto.FLOAT16}
        graph = helper.make_graph(
            [helper.make_node("Cast", ["x"], ["y"], to=types[dst])],
            "cast",
            [helper.make_tensor_value_info("x", types[src], ["n"])],
            [helper.make_tensor_value_info("y", types[dst], ["n"])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 7
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # callers run it on their own threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        probe = _probe()
        if src == "float16":
            with np.errstate(over="ignore"):
                probe = probe.astype(np.float16)
        with np.errstate(over="ignore"):
            return session if same(session.run(None, {"x": probe})[0], probe.astype(dst)) else None
    except Exception:  # no ONNX Runtime, or one that cannot build the graph: numpy's cast is always right
        return None


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """Bit for bit, but for NaN payloads: NaN where `want` is NaN, of the same sign."""
    bits = np.dtype(f"u{want.dtype.itemsize}")
    nan = np.isnan(want)
    return (
        np.array_equal(np.isnan(got), nan)
        and np.array_equal(np.signbit(got), np.signbit(want))
        and np.array_equal(got.view(bits)[~nan], want.view(bits)[~nan])
    )


def _cast(x: np.ndarray, src: str, dst: str) -> np.ndarray:
    if x.dtype != np.dtype(src):
        return x.astype(dst)
    if x.size < MIN_SIZE:
        return x.astype(dst)
    session = _session(src, dst)
    if session is None:
        return x.astype(dst)
    flat = np.ascontiguousarray(x).reshape(-1)
    return session.run(None, {"x": flat})[0].reshape(x.shape)


def to_float16(x: np.ndarray) -> np.ndarray:
    """`x.astype(np.float16)`, bit for bit but for NaN payloads; float32 input of MIN_SIZE values or more is cast
    by ONNX Runtime."""
    with np.errstate(over="ignore"):
        return _cast(x, "float32", "float16")


# every float16 bit pattern's float32 value: widening by lookup is exact and five times as fast as numpy's astype
_F16_TO_F32 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


def widen_by_lookup(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float16 values as float32, bit for bit what astype gives (NaN payloads included), into `out` when given."""
    return np.take(_F16_TO_F32, np.ascontiguousarray(x).view(np.uint16), out=out, mode="clip")  # all in range


def to_float32(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """`x.astype(np.float32)`, bit for bit but for NaN payloads. float16 input of MIN_SIZE values or more is cast
    by ONNX Runtime (0.2 ns a value), smaller float16 input by lookup (0.8 ns, into `out` when given; numpy's astype
    takes 4.5)."""
    if x.dtype == np.float16 and (x.size < MIN_SIZE or _session("float16", "float32") is None):
        return widen_by_lookup(x, out)
    return _cast(x, "float16", "float32")


def cast(x: np.ndarray, dtype: Any) -> np.ndarray:
    """`x.astype(dtype, copy=False)`, float32 <-> float16 of MIN_SIZE values or more by ONNX Runtime."""
    dtype = np.dtype(dtype)
    if dtype == x.dtype:
        return x
    if dtype == np.float16 and x.dtype == np.float32:
        return to_float16(x)
    if dtype == np.float32 and x.dtype == np.float16:
        return to_float32(x)
    return x.astype(dtype, copy=False)
