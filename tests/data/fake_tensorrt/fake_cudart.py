"""A FAKE CUDA runtime for tests of the kit's runner script (kit/run_engine.py): there is no GPU here. `lib` stands in
for libcudart.so: each function is a ctypes C function pointer (CFUNCTYPE) with the library's C signature, so the
script's ctypes calls (byref out-parameters, c_size_t, c_void_p) are marshalled as for the real library. "Device"
memory is host memory; every copy and free is checked against the live allocations, so a wrong pointer, size or
double free fails the run.
"""

import ctypes

ALLOCATIONS = {}  # address -> ctypes buffer (kept alive while allocated)
STREAMS = set()
GPU = b"Fake GPU (tests, no CUDA)"
CC = (8, 7)


def inside(ptr, nbytes):
    """True when [ptr, ptr + nbytes) lies in one live allocation."""
    return any(a <= ptr and ptr + nbytes <= a + len(buf) for a, buf in ALLOCATIONS.items())


def _malloc(out, size):
    buf = ctypes.create_string_buffer(max(size, 1))
    ALLOCATIONS[ctypes.addressof(buf)] = buf
    out[0] = ctypes.addressof(buf)
    return 0


def _free(ptr):
    if ptr not in ALLOCATIONS:
        return 1  # cudaErrorInvalidValue
    del ALLOCATIONS[ptr]
    return 0


def _memcpy(dst, src, n, kind):
    if (kind == 1 and not inside(dst, n)) or (kind == 2 and not inside(src, n)) or kind not in (1, 2):
        return 1
    ctypes.memmove(dst, src, n)
    return 0


def _stream_create(out):
    s = 0x5000 + len(STREAMS) + 1
    STREAMS.add(s)
    out[0] = s
    return 0


def _stream(s):
    return 0 if s in STREAMS else 400  # cudaErrorInvalidResourceHandle


def _stream_destroy(s):
    if s not in STREAMS:
        return 400
    STREAMS.discard(s)
    return 0


def _set_device(d):
    return 0 if d == 0 else 101  # cudaErrorInvalidDevice


def _attribute(out, attr, device):
    values = {75: CC[0], 76: CC[1]}
    if attr not in values or device != 0:
        return 1
    out[0] = values[attr]
    return 0


def _properties(props, device):
    ctypes.memmove(props, GPU, len(GPU))
    return 0


def _version(value):
    def get(out):
        out[0] = value
        return 0

    return get


_I, _P, _S = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
_PP, _PI = ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int)


class _Lib:
    pass


lib = _Lib()
for _name, _types, _fn in [
    ("cudaMalloc", (_PP, _S), _malloc),
    ("cudaFree", (_P,), _free),
    ("cudaMemcpy", (_P, _P, _S, _I), _memcpy),
    ("cudaStreamCreate", (_PP,), _stream_create),
    ("cudaStreamSynchronize", (_P,), _stream),
    ("cudaStreamDestroy", (_P,), _stream_destroy),
    ("cudaSetDevice", (_I,), _set_device),
    ("cudaDeviceGetAttribute", (_PI, _I, _I), _attribute),
    ("cudaGetDeviceProperties_v2", (_P, _I), _properties),
    ("cudaRuntimeGetVersion", (_PI,), _version(12040)),
    ("cudaDriverGetVersion", (_PI,), _version(12060)),
]:
    setattr(lib, _name, ctypes.CFUNCTYPE(_I, *_types)(_fn))
