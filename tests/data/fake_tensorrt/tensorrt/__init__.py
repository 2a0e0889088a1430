"""A FAKE `tensorrt` module for tests of the kit's runner script (kit/run_engine.py): TensorRT cannot run here (no
GPU). It implements only the calls the script makes, with the names and semantics of TensorRT's Python API (8.6,
10.x, 11.x: pick one with FAKE_TRT_VERSION), and computes the engine's outputs with ONNX Runtime on the ONNX model
it was "built" from, in FP32 whatever the builder flags. An "engine" is a small JSON file naming that model and the
tensors marked as outputs.

What it checks, as TensorRT would fail: before 10, a network made without EXPLICIT_BATCH cannot parse ONNX; from
11, BuilderFlag has no FP16/BF16/INT8; inputs must have a shape and a device address (a live fake_cudart
allocation of the right size) before execute_async_v3; outputs are handed to the output allocator with
reallocate_output (8.6) or reallocate_output_async (10 and later), then notify_shape.
"""

import ctypes
import json
import os

import numpy as np

__version__ = os.environ.get("FAKE_TRT_VERSION", "10.8.0.43")
_MAJOR = int(__version__.split(".")[0])


class _Enum:
    def __init__(self, name, value):
        self.name, self.value = name, value

    def __int__(self):
        return self.value

    def __repr__(self):
        return "DataType." + self.name if self.name.isupper() else self.name

    __str__ = __repr__


def _enum(cls_name, names):
    return type(cls_name, (), {n: _Enum(n, i) for i, n in enumerate(names)})


class Logger:
    WARNING, ERROR, INFO, VERBOSE = 2, 1, 3, 4

    def __init__(self, severity=WARNING):
        self.severity = severity


DataType = _enum(
    "DataType", ["FLOAT", "HALF", "INT8", "INT32", "BOOL", "UINT8", "INT64"] + (["BF16"] if _MAJOR >= 9 else [])
)
TensorIOMode = _enum("TensorIOMode", ["NONE", "INPUT", "OUTPUT"])
TensorFormat = _enum("TensorFormat", ["LINEAR", "CHW2", "HWC8"])
LayerType = _enum(
    "LayerType",
    [
        "CONVOLUTION",
        "ACTIVATION",
        "SHAPE",
        "CONSTANT",
        "ELEMENTWISE",
        "TRIP_LIMIT",
        "ITERATOR",
        "RECURRENCE",
        "LOOP_OUTPUT",
        "OTHER",
    ],
)
NetworkDefinitionCreationFlag = _enum(
    "NetworkDefinitionCreationFlag", (["EXPLICIT_BATCH"] if _MAJOR < 11 else ["_UNUSED"]) + ["STRONGLY_TYPED"]
)
BuilderFlag = _enum("BuilderFlag", (["FP16", "INT8", "BF16"] if _MAJOR < 11 else []) + ["DEBUG"])
_NP = {
    "FLOAT": np.float32,
    "HALF": np.float16,
    "INT8": np.int8,
    "INT32": np.int32,
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "INT64": np.int64,
}
_ONNX = {1: "FLOAT", 10: "HALF", 3: "INT8", 6: "INT32", 9: "BOOL", 2: "UINT8", 7: "INT64", 16: "BF16"}


def nptype(dtype):
    if dtype.name not in _NP:
        raise TypeError("Could not resolve TensorRT datatype to an equivalent numpy datatype.")
    return _NP[dtype.name]


def init_libnvinfer_plugins(logger, namespace):
    return True


class Dims(tuple):
    pass


class ITensor:
    def __init__(self, network, name, shape=None):
        self.network, self.name, self.shape = network, name, shape

    @property
    def is_network_output(self):
        return self.name in self.network.outputs


class ILayer:
    def __init__(self, network, node):
        kinds = {
            "Shape": LayerType.SHAPE,
            "Constant": LayerType.CONSTANT,
            "Conv": LayerType.CONVOLUTION,
            "Relu": LayerType.ACTIVATION,
        }
        self.type = kinds.get(node.op_type, LayerType.OTHER)
        self.name = node.name
        self._outputs = [ITensor(network, n) for n in node.output if n]
        self.num_outputs = len(self._outputs)

    def get_output(self, i):
        return self._outputs[i]


class INetworkDefinition:
    def __init__(self, flags):
        self.flags = flags
        self.layers, self.inputs, self.outputs, self.onnx = [], [], [], None

    @property
    def num_layers(self):
        return len(self.layers)

    def get_layer(self, i):
        return self.layers[i]

    @property
    def num_inputs(self):
        return len(self.inputs)

    def get_input(self, i):
        return self.inputs[i]

    def mark_output(self, tensor):
        if tensor.name not in self.outputs:
            self.outputs.append(tensor.name)


class OnnxParser:
    def __init__(self, network, logger):
        self.network, self.errors = network, []

    @property
    def num_errors(self):
        return len(self.errors)

    def get_error(self, i):
        return self.errors[i]

    def parse_from_file(self, path):
        import onnx

        net = self.network
        if _MAJOR < 10 and not net.flags & (1 << int(NetworkDefinitionCreationFlag.EXPLICIT_BATCH)):
            self.errors.append("the ONNX parser needs an explicit batch network (EXPLICIT_BATCH) before TensorRT 10")
            return False
        model = onnx.load(path)
        inits = {i.name for i in model.graph.initializer}
        for vi in model.graph.input:
            if vi.name not in inits:
                dims = [d.dim_value if d.HasField("dim_value") else -1 for d in vi.type.tensor_type.shape.dim]
                net.inputs.append(ITensor(net, vi.name, Dims(dims)))
        net.layers = [ILayer(net, n) for n in model.graph.node]
        net.outputs = [o.name for o in model.graph.output]
        net.onnx = os.path.abspath(path)
        return True


class IBuilderConfig:
    def __init__(self):
        self.flags, self.profiles = [], []

    def set_flag(self, flag):
        self.flags.append(flag.name)

    def add_optimization_profile(self, profile):
        self.profiles.append(profile)
        return len(self.profiles) - 1


class IOptimizationProfile:
    def __init__(self):
        self.shapes = {}

    def set_shape(self, name, min, opt, max):  # noqa: A002 - TensorRT's keyword names
        self.shapes[name] = [list(min), list(opt), list(max)]


class Builder:
    def __init__(self, logger):
        self.logger = logger

    def create_network(self, flags=0):
        return INetworkDefinition(flags)

    def create_builder_config(self):
        return IBuilderConfig()

    def create_optimization_profile(self):
        return IOptimizationProfile()

    def build_serialized_network(self, network, config):
        for name in (t.name for t in network.inputs if any(d < 0 for d in t.shape)):
            if not any(name in p.shapes for p in config.profiles):
                return None  # TensorRT: a dynamic input needs an optimization profile
        doc = {"fake_engine": 1, "onnx": network.onnx, "outputs": network.outputs, "flags": config.flags}
        return json.dumps(doc).encode()


class Runtime:
    def __init__(self, logger):
        self.logger = logger

    def deserialize_cuda_engine(self, data):
        try:
            doc = json.loads(bytes(data).decode())
        except ValueError:
            return None
        return ICudaEngine(doc) if isinstance(doc, dict) and doc.get("fake_engine") == 1 else None


class ICudaEngine:
    def __init__(self, doc):
        import onnx
        import onnxruntime as ort

        model = onnx.load(doc["onnx"])
        inits = {i.name for i in model.graph.initializer}
        self.inputs = {vi.name: _ONNX[vi.type.tensor_type.elem_type] for vi in model.graph.input if vi.name not in
                       inits}  # fmt: skip
        declared = [o.name for o in model.graph.output]
        for name in doc["outputs"]:
            if name not in declared:
                model.graph.output.append(onnx.ValueInfoProto(name=name))
        self.session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        types = {o.name: o.type for o in self.session.get_outputs()}
        kinds = {
            "tensor(float)": "FLOAT",
            "tensor(float16)": "HALF",
            "tensor(int64)": "INT64",
            "tensor(int32)": "INT32",
            "tensor(bool)": "BOOL",
            "tensor(int8)": "INT8",
            "tensor(uint8)": "UINT8",
        }
        self.outputs = {n: kinds[types[n]] for n in doc["outputs"]}
        self.names = list(self.inputs) + list(self.outputs)

    @property
    def num_io_tensors(self):
        return len(self.names)

    def get_tensor_name(self, i):
        return self.names[i]

    def get_tensor_mode(self, name):
        return TensorIOMode.INPUT if name in self.inputs else TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name):
        return getattr(DataType, self.inputs.get(name) or self.outputs[name])

    def get_tensor_format(self, name):
        return TensorFormat.LINEAR

    def is_shape_inference_io(self, name):
        return False

    def create_execution_context(self):
        return IExecutionContext(self)


class IOutputAllocator:
    def __init__(self):
        pass


class IExecutionContext:
    def __init__(self, engine):
        self.engine, self.shapes, self.addresses, self.allocators = engine, {}, {}, {}

    def set_input_shape(self, name, shape):
        if name not in self.engine.inputs:
            return False
        self.shapes[name] = tuple(int(d) for d in shape)
        return True

    def set_tensor_address(self, name, ptr):
        self.addresses[name] = int(ptr)
        return True

    def set_output_allocator(self, name, allocator):
        if name not in self.engine.outputs:
            return False
        self.allocators[name] = allocator
        return True

    def execute_async_v3(self, stream_handle):
        import fake_cudart

        if stream_handle not in fake_cudart.STREAMS:
            return False
        feed = {}
        for name, kind in self.engine.inputs.items():
            if name not in self.shapes or name not in self.addresses:
                return False  # TensorRT: every input needs a shape and an address
            dtype = np.dtype(_NP[kind])
            nbytes = int(np.prod(self.shapes[name])) * dtype.itemsize
            if not fake_cudart.inside(self.addresses[name], nbytes):
                return False
            feed[name] = np.frombuffer(ctypes.string_at(self.addresses[name], nbytes), dtype).reshape(self.shapes[name])
        names = list(self.engine.outputs)
        for name, arr in zip(names, self.engine.session.run(names, feed)):
            arr = np.ascontiguousarray(arr)
            allocator = self.allocators.get(name)
            if allocator is None:
                return False
            if _MAJOR >= 10:
                ptr = allocator.reallocate_output_async(name, 0, arr.nbytes, 256, stream_handle)
            else:
                ptr = allocator.reallocate_output(name, 0, arr.nbytes, 256)
            if not ptr or not fake_cudart.inside(ptr, arr.nbytes):
                return False
            ctypes.memmove(ptr, arr.ctypes.data, arr.nbytes)
            allocator.notify_shape(name, Dims(arr.shape))
        return True
