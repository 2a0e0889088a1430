"""Every float32 bit pattern (2^32) and every float16 one (2^16) cast by trtverify.util.halfcast and by numpy.

halfcast uses ONNX Runtime's vectorised Cast for big arrays; this checks it gives numpy's astype bit for bit,
NaN payloads aside (a NaN stays a NaN of the same sign). About 5 minutes on a 2-core machine (330 s,
2026-11-25: all agree).

Usage: python bench/halfcast_exhaustive.py [--chunk-bits 24]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from trtverify.util import halfcast


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunk-bits", type=int, default=24)
    args = ap.parse_args()
    if halfcast._session("float32", "float16") is None or halfcast._session("float16", "float32") is None:
        print("the fast path is off here (ONNX Runtime failed the probe or is missing): nothing to check")
        return 1
    t0 = time.perf_counter()
    step = 1 << args.chunk_bits
    bad = 0
    for start in range(0, 1 << 32, step):
        x = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32).view(np.float32)
        with np.errstate(over="ignore"):
            want = x.astype(np.float16)
        if not halfcast.same(halfcast.to_float16(x), want):
            bad += 1
            print(f"float32 -> float16 differs in [{start:#010x}, {start + step:#010x})")
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    h = np.resize(h, 1 << 17)  # over MIN_SIZE twice: the fast path
    if not halfcast.same(halfcast.to_float32(h), h.astype(np.float32)):
        bad += 1
        print("float16 -> float32 differs")
    print(f"{'all agree' if not bad else f'{bad} ranges differ'} ({time.perf_counter() - t0:.1f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
