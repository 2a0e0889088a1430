#!/usr/bin/env python3
"""Run a TensorRT engine on a trtverify capture kit's inputs and save every output it gives, for targets without
Polygraphy or trtexec (a Jetson, a bare GPU box). Written into the kit by `trtverify capture`; the kit's README.md
has the commands, trtverify's docs/captured.md the details.

Needs only `tensorrt` (8.6 to 11) and `numpy`, on Python 3.8+; device memory comes from libcudart.so through ctypes.
Writes OUT/I/NAME.npy per feed I ('%', '/' and ':' in NAME as %25, %2F, %3A) and OUT/run.json. Exit codes: 0 done,
2 bad arguments or kit, 3 tensorrt or libcudart missing, 4 TensorRT or CUDA failed.
"""

import argparse
import ctypes
import datetime
import glob
import hashlib
import importlib
import json
import os
import platform
import shutil
import sys

import numpy as np

RUNNER_FORMAT = 1
ESCAPES = {"%": "%25", "/": "%2F", ":": "%3A"}
H2D, D2H = 1, 2  # cudaMemcpyKind
CC_MAJOR, CC_MINOR = 75, 76  # cudaDevAttrComputeCapabilityMajor / Minor
PRECISIONS = ("fp16", "bf16", "int8")  # BuilderFlag members up to TensorRT 10; 11 has none
CONVERT = "convert the model, e.g. with ModelOpt AutoCast, and build without the flag"  # what to do on 11
ONNX_FLAGS = {  # the switches that go with --onnx (as --save-engine does), and their help
    "--mark-all": "every tensor a network output (layerwise)",
    "--fp16": "BuilderFlag.FP16 (TensorRT 10 and older)",
    "--bf16": "BuilderFlag.BF16 (TensorRT 9 and 10)",
    "--int8": "BuilderFlag.INT8, for a Q/DQ model (up to 10)",
    "--strongly-typed": "a strongly typed network (TensorRT 10; always so in 11)",
}


class Failed(Exception):
    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code


def count(n, word):
    return "{} {}{}".format(n, word, "" if n == 1 else "s")


# -- the kit's inputs and their digests (as trtverify computes them: toolout/kit.py) -------------------------------
def feed_digest(feed):
    h = hashlib.sha256()
    for name in sorted(feed):
        arr = np.asarray(feed[name])
        h.update("{}\0{}\0{}\0".format(name, arr.dtype.str.lstrip("<>=|"), list(arr.shape)).encode())
        h.update(np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes())
    return h.hexdigest()


def read_kit(kit):
    """({input name: shape}, the kit's feeds: a list of {input name: array}) as its manifest.json describes them; each
    feed's digest must be the one the manifest records."""
    path = os.path.join(kit, "manifest.json")
    try:
        with open(path) as fh:
            manifest = json.load(fh)
        inputs = [(str(i["name"]), tuple(int(x) for x in i["shape"]), str(i["dtype"])) for i in manifest["inputs"]]
        digests = [str(d) for d in manifest["sample_digests"]]
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        why = f"not a readable trtverify kit manifest ({exc}); run this script in the kit's folder or give --kit"
        raise Failed(2, f"{path}: {why}") from None
    samples = len(digests)
    npz = os.path.join(kit, str(files.get("npz", "inputs.npz")))
    feeds = [{} for _ in range(samples)]
    if os.path.isfile(npz):
        with np.load(npz, allow_pickle=False) as rows:
            for name, shape, dtype in inputs:
                if name not in rows.files:
                    raise Failed(2, f"{npz}: no array '{name}' (the manifest's input)")
                arr = rows[name]
                if arr.shape == (samples,) + shape:  # stacked: an input without a batch axis
                    parts = [arr[i] for i in range(samples)]
                elif shape and arr.shape == (samples * shape[0],) + shape[1:]:  # concatenated along the batch axis
                    parts = [arr[i * shape[0] : (i + 1) * shape[0]] for i in range(samples)]
                else:
                    why = f"'{name}' has shape {list(arr.shape)}, not {samples} feeds of {list(shape)}"
                    raise Failed(2, f"{npz}: {why}")
                for i, part in enumerate(parts):
                    feeds[i][name] = np.ascontiguousarray(part, dtype=dtype)
    else:  # trtexec's raw files: the first feed only
        raw = files.get("trtexec", {})
        if samples != 1:
            raise Failed(2, f"{npz}: missing, and the trtexec .bin files hold one feed of the kit's {samples}")
        for name, shape, dtype in inputs:
            f = os.path.join(kit, str(raw.get(name, "")))
            if not os.path.isfile(f):
                raise Failed(2, f"{npz}: missing, and so is the trtexec file of input '{name}' ({f})")
            arr = np.fromfile(f, dtype=np.dtype(dtype).newbyteorder("<"))
            if arr.size != int(np.prod(shape)):
                raise Failed(2, f"{f}: {arr.size} values, input '{name}' is {list(shape)}")
            feeds[0][name] = arr.reshape(shape).astype(dtype)
    for k, (got, want) in enumerate(zip([feed_digest(f) for f in feeds], digests)):
        if got != want:
            why = f"feed {k} does not have the digest the manifest records ({got[:12]} != {want[:12]})"
            raise Failed(2, f"{kit}: {why}: the kit was changed; make it again with `trtverify capture`")
    return {name: shape for name, shape, _ in inputs}, feeds


# -- the CUDA runtime, through ctypes --------------------------------------------------------------------------------
def find_cudart():
    """libcudart.so where Polygraphy looks (LD_LIBRARY_PATH, the CUDA toolkit, the system) and where pip puts it beside
    TensorRT's wheels (nvidia/cuda_runtime/lib, nvidia/cu13/lib): the newest one in the first folder that has one."""
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    dirs += ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/aarch64-linux/lib", "/usr/lib/x86_64-linux-gnu",
             "/usr/lib/aarch64-linux-gnu", "/usr/lib", "/lib"]  # fmt: skip
    for site in sys.path:
        dirs += sorted(glob.glob(os.path.join(site, "nvidia", "cuda_runtime", "lib")))
        dirs += sorted(glob.glob(os.path.join(site, "nvidia", "cu[0-9]*", "lib")))
    for d in dirs:
        found = sorted(glob.glob(os.path.join(d, "libcudart.so*")), reverse=True)
        if found:
            return found[0]
    return "libcudart.so"  # the loader's own search


def load_cudart(spec):
    """The CUDA runtime library: a path, or 'python:MODULE' (a module whose `lib` stands in for it: tests)."""
    if spec and spec.startswith("python:"):
        return importlib.import_module(spec[len("python:") :]).lib
    path = spec or find_cudart()
    try:
        return ctypes.CDLL(path)
    except OSError as exc:
        raise Failed(3, f"cannot load the CUDA runtime library {path} ({exc}); give its path with --cudart") from None


class Cuda:
    """The few CUDA runtime calls the run needs, bound with their C signatures; `call` checks the status they return."""

    VOIDP, INT, SIZE = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    SIGNATURES = {  # name: (argtypes, restype)
        "cudaMalloc": ([ctypes.POINTER(VOIDP), SIZE], INT),
        "cudaFree": ([VOIDP], INT),
        "cudaMemcpy": ([VOIDP, VOIDP, SIZE, INT], INT),
        "cudaStreamCreate": ([ctypes.POINTER(VOIDP)], INT),
        "cudaStreamSynchronize": ([VOIDP], INT),
        "cudaStreamDestroy": ([VOIDP], INT),
        "cudaSetDevice": ([INT], INT),
        "cudaDeviceGetAttribute": ([ctypes.POINTER(INT), INT, INT], INT),
        "cudaRuntimeGetVersion": ([ctypes.POINTER(INT)], INT),
        "cudaDriverGetVersion": ([ctypes.POINTER(INT)], INT),
        "cudaGetErrorString": ([INT], ctypes.c_char_p),
        "cudaGetDeviceProperties_v2": ([VOIDP, INT], INT),  # CUDA 12 and later
        "cudaGetDeviceProperties": ([VOIDP, INT], INT),
    }
    OPTIONAL = ("cudaGetErrorString", "cudaGetDeviceProperties_v2", "cudaGetDeviceProperties")  # may be missing

    def __init__(self, lib):
        self.lib, self.fn = lib, {}  # fn: the functions bound, by name
        for name, (argtypes, restype) in self.SIGNATURES.items():
            fn = getattr(lib, name, None) if name in self.OPTIONAL else getattr(lib, name)
            if fn is not None:
                fn.argtypes, fn.restype = argtypes, restype
                self.fn[name] = fn

    def call(self, name, *args, what=None):
        status = self.fn[name](*args)
        if status != 0:
            text = self.fn.get("cudaGetErrorString")
            why = "" if text is None else ": " + (text(status) or b"").decode("utf-8", "replace")
            raise Failed(4, f"CUDA error {status} in {what or name}{why}")

    def get(self, name, ctype, *args):
        """The value a call writes through its first argument (a pointer)."""
        value = ctype()
        self.call(name, ctypes.byref(value), *args)
        return value.value

    def malloc(self, nbytes):
        return self.get("cudaMalloc", ctypes.c_void_p, max(int(nbytes), 1))

    def free(self, ptr):
        self.call("cudaFree", ptr)

    def to_device(self, ptr, arr):
        self.call("cudaMemcpy", ptr, arr.ctypes.data, arr.nbytes, H2D, what="cudaMemcpy to the device")

    def to_host(self, arr, ptr):
        self.call("cudaMemcpy", arr.ctypes.data, ptr, arr.nbytes, D2H, what="cudaMemcpy to the host")

    def describe(self, device):
        """GPU name, compute capability, CUDA runtime and driver versions."""
        self.call("cudaSetDevice", device)
        cc = [self.get("cudaDeviceGetAttribute", ctypes.c_int, attr, device) for attr in (CC_MAJOR, CC_MINOR)]
        props = ctypes.create_string_buffer(8192)  # cudaDeviceProp (about 1 KB) begins with char name[256]
        getter = self.fn.get("cudaGetDeviceProperties_v2", self.fn.get("cudaGetDeviceProperties"))
        name = "unknown"
        if getter is not None and getter(ctypes.addressof(props), device) == 0:
            name = props.raw[:256].split(b"\0")[0].decode("utf-8", "replace")
        versions = [self.get(f, ctypes.c_int) for f in ("cudaRuntimeGetVersion", "cudaDriverGetVersion")]
        runtime, driver = [f"{v // 1000}.{(v % 1000) // 10}" for v in versions]
        return {"gpu": name, "compute_capability": "{}.{}".format(*cc), "cuda_runtime": runtime, "cuda_driver": driver}


# -- TensorRT (8.6, 10 and 11 differ: a name missing from an enum is a version without it) -----------------------------
def mark_all(trt, network):
    """Every layer's outputs marked as network outputs, but for shape and constant layers and loop bodies (which
    cannot be outputs), as Polygraphy's `--trt-outputs mark all` does. Returns the number marked."""
    starts = [getattr(trt.LayerType, n) for n in ("TRIP_LIMIT", "ITERATOR", "RECURRENCE") if hasattr(trt.LayerType, n)]
    ends = [getattr(trt.LayerType, n) for n in ("LOOP_OUTPUT",) if hasattr(trt.LayerType, n)]
    skip = [trt.LayerType.SHAPE, trt.LayerType.CONSTANT]
    marked, in_loop = 0, False
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if layer.type in starts:
            in_loop = True
        elif layer.type in ends:
            in_loop = False
        if in_loop or layer.type in skip:
            continue
        for j in range(layer.num_outputs):
            t = layer.get_output(j)
            if t is not None and not t.is_network_output:
                network.mark_output(t)
                marked += 1
    return marked


def build(trt, logger, args, shapes):
    """A serialized engine built from args.onnx; `shapes`: the kit's input shapes (the profile of a dynamic input)."""
    builder = trt.Builder(logger)
    flags = 0
    major = str(trt.__version__).split(".")[0]
    explicit = getattr(trt.NetworkDefinitionCreationFlag, "EXPLICIT_BATCH", None)
    if explicit is not None and (int(major) if major.isdigit() else 0) < 10:  # the ONNX parser needs it before 10
        flags |= 1 << int(explicit)
    if args.strongly_typed:
        typed = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
        if typed is None:
            raise Failed(2, f"--strongly-typed: TensorRT {trt.__version__} has no strongly typed networks")
        flags |= 1 << int(typed)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(os.path.abspath(args.onnx)):
        errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise Failed(4, "{}: TensorRT's ONNX parser failed: {}".format(args.onnx, "; ".join(errors) or "no message"))
    marked = mark_all(trt, network) if args.mark_all else 0
    config = builder.create_builder_config()
    precisions = [flag for flag in PRECISIONS if getattr(args, flag)]
    for flag in precisions:
        member = getattr(trt.BuilderFlag, flag.upper(), None)
        if member is None:
            why = f"TensorRT {trt.__version__} has no {flag.upper()} builder flag: its networks are strongly typed"
            raise Failed(2, f"--{flag}: {why}, the precision is the ONNX model's ({CONVERT})")
        if args.strongly_typed:
            raise Failed(2, f"--{flag} and --strongly-typed: a strongly typed network takes no precision flags")
        config.set_flag(member)
    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    dynamic = [t.name for t in inputs if any(int(d) < 0 for d in t.shape)]
    if dynamic:
        profile = builder.create_optimization_profile()
        for name in dynamic:
            if name not in shapes:
                raise Failed(2, f"{args.onnx}: input '{name}' is not one of the kit's")
            profile.set_shape(name, shapes[name], shapes[name], shapes[name])
        config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise Failed(4, f"{args.onnx}: TensorRT failed to build the engine (its log above says why)")
    return bytes(plan), {"marked": marked, "precision_flags": precisions, "strongly_typed": bool(args.strongly_typed)}


def host_dtype(trt, dtype):
    """(numpy dtype of the raw bytes, how they become a numpy array) for a TensorRT type; None when numpy has none."""
    if dtype == getattr(trt.DataType, "BF16", None):  # TensorRT 9 and later
        return np.dtype(np.uint16), "bf16"
    try:
        return np.dtype(trt.nptype(dtype)), None
    except TypeError:
        return None, None


def make_allocator(trt, cuda):
    """An output allocator, as Polygraphy's TensorRT runner uses for every output: it learns each output's shape
    (data-dependent ones too) when the engine runs."""

    class OutputAllocator(trt.IOutputAllocator):
        def __init__(self):
            trt.IOutputAllocator.__init__(self)
            self.buffers = {}  # name -> (device pointer, bytes)
            self.shapes = {}

        def reallocate_output(self, tensor_name, memory, size, alignment):
            ptr, have = self.buffers.get(tensor_name, (None, 0))
            if ptr is None or have < size:
                if ptr is not None:
                    cuda.free(ptr)
                ptr = cuda.malloc(size)
                self.buffers[tensor_name] = (ptr, max(int(size), 1))
            return ptr

        def reallocate_output_async(self, tensor_name, memory, size, alignment, stream):  # TensorRT 10 and later
            return self.reallocate_output(tensor_name, memory, size, alignment)

        def notify_shape(self, tensor_name, shape):
            self.shapes[tensor_name] = tuple(int(d) for d in shape)

    return OutputAllocator()


def run(trt, cuda, engine, feeds):
    """Each feed through the engine: ([{name: array} per feed], {name: why} of the outputs not saved, notes)."""
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    outputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
    missing = [n for n in inputs if n not in feeds[0]]
    if missing:
        raise Failed(2, f"the engine's inputs {missing} are not in the kit (it has {sorted(feeds[0])})")
    skipped, notes = {}, {}  # notes: a dict for their order without repeats
    linear = getattr(trt.TensorFormat, "LINEAR", None)
    for n in names:
        if linear is not None and engine.get_tensor_format(n) != linear:
            if n in inputs:
                raise Failed(2, f"input '{n}' is not in linear format: not supported here")
            skipped[n] = "a vectorized format"
    for n in inputs:
        if engine.is_shape_inference_io(n):
            raise Failed(2, f"input '{n}' is a shape tensor: not supported here; use Polygraphy")
    context = engine.create_execution_context()
    if context is None:
        raise Failed(4, "TensorRT could not create an execution context (out of memory?)")
    allocator = make_allocator(trt, cuda)
    for n in outputs:
        if n not in skipped and not context.set_output_allocator(n, allocator):
            raise Failed(4, f"output '{n}': set_output_allocator failed")
    stream = cuda.get("cudaStreamCreate", ctypes.c_void_p) or 0
    results, held = [], []
    try:
        for k, feed in enumerate(feeds):
            for n in inputs:
                want, _ = host_dtype(trt, engine.get_tensor_dtype(n))
                arr = feed[n]
                if want is not None and arr.dtype != want:
                    notes[f"input '{n}' cast from {arr.dtype} to the engine's {want}"] = None
                    arr = arr.astype(want)
                arr = np.ascontiguousarray(arr)
                if not context.set_input_shape(n, arr.shape):
                    raise Failed(2, f"input '{n}': the engine does not take shape {list(arr.shape)} (its profile)")
                held.append(cuda.malloc(arr.nbytes))
                cuda.to_device(held[-1], arr)
                if not context.set_tensor_address(n, held[-1]):
                    raise Failed(4, f"input '{n}': set_tensor_address failed")
            if not context.execute_async_v3(stream):
                raise Failed(4, f"feed {k}: execute_async_v3 failed (TensorRT's log above says why)")
            cuda.call("cudaStreamSynchronize", stream)
            got = {}
            for n in outputs:
                if n in skipped:
                    continue
                dtype = engine.get_tensor_dtype(n)
                raw, convert = host_dtype(trt, dtype)
                shape = allocator.shapes.get(n)
                if raw is None:
                    skipped[n] = f"type {dtype} has no numpy type"
                elif shape is None or n not in allocator.buffers:
                    skipped[n] = "TensorRT gave no buffer or shape for it"
                else:
                    arr = np.empty(shape, dtype=raw)
                    if arr.nbytes:
                        cuda.to_host(arr, allocator.buffers[n][0])
                    if convert == "bf16":  # numpy has no bfloat16: its values exactly, as float32
                        arr = (arr.astype(np.uint32) << 16).view(np.float32)
                    got[n] = arr
            results.append(got)
            while held:
                cuda.free(held.pop())
    finally:  # the inputs' device buffers left by a failure, then the outputs'
        for ptr in held + [ptr for ptr, _ in allocator.buffers.values()]:
            cuda.free(ptr)
        cuda.call("cudaStreamDestroy", stream)
    return results, skipped, list(notes)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save(out, results, record):
    """The outputs as OUT/I/NAME.npy and OUT/run.json, written beside OUT first and moved in place at the end."""
    if os.path.exists(out) and os.listdir(out):
        raise Failed(2, f"{out}: exists and is not empty; give another --out or remove it")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = os.path.abspath(out) + ".partial"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    for i, tensors in enumerate(results):
        os.makedirs(os.path.join(tmp, str(i)))
        for name, arr in tensors.items():
            escaped = "".join(ESCAPES.get(ch, ch) for ch in name)
            np.save(os.path.join(tmp, str(i), escaped + ".npy"), arr, allow_pickle=False)
    with open(os.path.join(tmp, "run.json"), "w") as fh:
        json.dump(record, fh, indent=1)
    if os.path.exists(out):
        os.rmdir(out)
    os.rename(tmp, out)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--engine", help="a serialized TensorRT engine (.engine, .plan) built for this GPU")
    src.add_argument("--onnx", help="the ONNX model to build the engine from, here")
    for flag, text in ONNX_FLAGS.items():
        p.add_argument(flag, action="store_true", help="with --onnx: " + text)
    p.add_argument("--save-engine", help="with --onnx: also write the engine built to this file")
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--kit", default=here, help="the kit's folder (default: this script's folder)")
    p.add_argument("--out", help="the output folder (default: KIT/captured/runner)")
    p.add_argument("--device", type=int, default=0, help="the CUDA device (default: 0)")
    p.add_argument("--cudart", help="the CUDA runtime library (default: libcudart.so, found as Polygraphy finds it)")
    args = p.parse_args(argv)
    if args.engine and (args.save_engine or any(getattr(args, f[2:].replace("-", "_")) for f in ONNX_FLAGS)):
        p.error("--mark-all, --fp16, --bf16, --int8, --strongly-typed and --save-engine go with --onnx")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        try:
            import tensorrt as trt
        except ImportError as exc:
            raise Failed(3, f"cannot import tensorrt ({exc}): install TensorRT's Python package") from None
        shapes, feeds = read_kit(args.kit)
        out = args.out or os.path.join(args.kit, "captured", "runner")
        cuda = Cuda(load_cudart(args.cudart))
        where = cuda.describe(args.device)
        logger = trt.Logger(trt.Logger.WARNING)
        if hasattr(trt, "init_libnvinfer_plugins"):
            trt.init_libnvinfer_plugins(logger, "")
        if not os.path.isfile(args.onnx or args.engine):
            raise Failed(2, f"{args.onnx or args.engine}: no such file")
        built = None
        if args.onnx:
            plan, built = build(trt, logger, args, shapes)
            if args.save_engine:
                with open(args.save_engine, "wb") as fh:
                    fh.write(plan)
        else:
            with open(args.engine, "rb") as fh:
                plan = fh.read()
        engine_path = args.save_engine if args.onnx else args.engine
        runtime = trt.Runtime(logger)  # kept while the engine lives
        engine = runtime.deserialize_cuda_engine(plan)
        if engine is None:
            why = "built by another TensorRT version or for another GPU? its log above says why"
            raise Failed(4, f"TensorRT could not load the engine ({why})")
        results, skipped, notes = run(trt, cuda, engine, feeds)
        record = {  # what ran, what it fed and gave back, where it ran (the GPU facts of `where` last)
            "trtverify_runner": RUNNER_FORMAT, "tensorrt": str(trt.__version__),
            "engine": os.path.abspath(engine_path) if engine_path else None,
            "engine_sha256": hashlib.sha256(plan).hexdigest(),
            "built_from": os.path.abspath(args.onnx) if args.onnx else None,
            "onnx_sha256": sha256_file(args.onnx) if args.onnx else None, "build": built,
            "kit": os.path.abspath(args.kit),
            "kit_digest": hashlib.sha256("\n".join(feed_digest(f) for f in feeds).encode()).hexdigest(),
            "feeds": len(feeds), "tensors": len(results[0]) if results else 0, "skipped": skipped, "notes": notes,
            "python": platform.python_version(), "host": platform.node(), "platform": platform.platform(),
            "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), **where,
        }  # fmt: skip
        save(out, results, record)
    except Failed as exc:
        sys.stderr.write(f"run_engine.py: {exc}\n")
        return exc.code
    what = "{}, {} each".format(count(len(results), "feed"), count(record["tensors"], "tensor"))
    on = "TensorRT {} on {} (sm {})".format(record["tensorrt"], record["gpu"], record["compute_capability"])
    not_saved = "; not saved: " + ", ".join(sorted(skipped)) if skipped else ""
    sys.stdout.write(f"{out}: {what}, {on}{not_saved}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
