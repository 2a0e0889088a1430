# ruff: noqa: E501 -- the snippets keep the tools' long lines whole (a split line would test the wrap joiner)
"""Torch-TensorRT's console (issue 39, item 2): each TensorRT subgraph with its build time, the ops left to PyTorch
and why, the interpreter's lines grouped per subgraph. Snippets in the formats pytorch/TensorRT prints: the dynamo
debug log (py/torch_tensorrt/dynamo/_compiler.py, partitioning/_adjacency_partitioner.py,
conversion/_TRTInterpreter.py; the lines below follow a Torch-TensorRT 2.x debug log of a model with torchvision's nms,
posted in a public repository), the dry-run report (dynamo/_DryRunTracker.py, as docs/tutorials print it) and the
TorchScript front end's refusal (the "before" block of pytorch/TensorRT#521)."""

from __future__ import annotations

from trtverify.buildlog.parser import parse

DYNAMO = """\
DEBUG:torch_tensorrt.dynamo.partitioning._adjacency_partitioner:
Number of TensorRT-Accelerated Engines Generated: 1
DEBUG:torch_tensorrt.dynamo.partitioning._adjacency_partitioner:
Supported Nodes:
- torch.ops.aten.reshape.default + Operator Count: 1
- torch.ops.aten.mul.Tensor + Operator Count: 3

DEBUG:torch_tensorrt.dynamo.partitioning._adjacency_partitioner:
Unsupported or Excluded Nodes:
- torch.ops.torchvision.nms.default + Operator Count: 1
- torch.ops.aten.index.Tensor + Operator Count: 1

DEBUG:torch_tensorrt.dynamo._compiler:Detected support for 10 operators out of 13 in subgraph.
DEBUG:torch_tensorrt.dynamo._compiler:Converting submodule: _run_on_acc_0
DEBUG:torch_tensorrt.dynamo.conversion._TRTInterpreter:Converting node x (kind: x, args: ())
DEBUG:torch_tensorrt.dynamo.conversion._TRTInterpreter:Adding input to in-progress INetwork: x [shape=[10], dtype=DataType.FLOAT]
INFO:torch_tensorrt.dynamo.conversion._TRTInterpreter:Converted node x [x] (Inputs: () | Outputs: (x: (10,)@torch.float32))
DEBUG:torch_tensorrt.dynamo.conversion._TRTInterpreter:Converting node /mul (kind: aten.mul.Tensor, args: ('x <Node>', 'c <Node>'))
INFO:torch_tensorrt.dynamo.conversion._TRTInterpreter:Converted node /mul [aten.mul.Tensor] (Inputs: (x: (10, 1)@torch.float32) | Outputs: (mul: (10, 4)@torch.float32))
DEBUG:torch_tensorrt.dynamo.conversion._TRTInterpreter:Converting node /add (kind: aten.add.Tensor, args: ('mul <Node>', 'c <Node>'))
INFO:torch_tensorrt.dynamo.conversion._TRTInterpreter:Converted node /add [aten.add.Tensor] (Inputs: (mul: (10, 4)@torch.float32) | Outputs: (add: (10, 4)@torch.float32))
DEBUG:torch_tensorrt.dynamo.conversion._TRTInterpreter:Marking output output0 [shape=(10, 4), dtype=DataType.FLOAT]
INFO:torch_tensorrt.dynamo.conversion._TRTInterpreter:TRT INetwork construction elapsed time: 0:00:00.006279
INFO:torch_tensorrt.dynamo.conversion._TRTInterpreter:Build TRT engine elapsed time: 0:00:00.821156
INFO:torch_tensorrt.dynamo.conversion._TRTInterpreter:TRT Engine uses: 72812 bytes of Memory
DEBUG:torch_tensorrt.dynamo._compiler:Submodule in PyTorch: _run_on_gpu_1
"""


def _by_kind(text: str) -> dict:
    out: dict = {}
    for f in parse(text).findings:
        out.setdefault(f.kind, []).append(f)
    return out


def test_dynamo_engine_subgraph_build_time_memory_and_conversion():
    found = _by_kind(DYNAMO)
    (engine,) = found["torchtrt_engine"]
    assert engine.layers == ("_run_on_acc_0",)
    assert engine.detail["build_s"] == 0.821156 and engine.detail["network_s"] == 0.006279
    assert engine.detail["memory_bytes"] == 72812
    assert "0.821156 s" in engine.message
    (conv,) = found["torchtrt_conversion"]
    assert conv.detail["submodule"] == "_run_on_acc_0" and conv.detail["nodes"] == 3
    assert conv.detail["ops"] == {"x": 1, "aten.mul.Tensor": 1, "aten.add.Tensor": 1}
    (part,) = found["torchtrt_partition"]
    assert part.detail["engines"] == 1 and (part.detail["supported_ops"], part.detail["total_ops"]) == (10, 13)


def test_dynamo_ops_left_to_pytorch_are_named_with_counts():
    (fb,) = _by_kind(DYNAMO)["torchtrt_fallback"]
    assert fb.severity == "medium"
    assert fb.detail["ops"] == {"torch.ops.torchvision.nms.default": 1, "torch.ops.aten.index.Tensor": 1}
    assert fb.detail["submodules_in_torch"] == ["_run_on_gpu_1"]
    assert "torch.ops.torchvision.nms.default" in fb.message and "_run_on_gpu_1" in fb.message


def test_every_line_of_the_dynamo_log_is_recognised():
    parsed = parse(DYNAMO)
    assert parsed.unknown_lines == 0, parsed.unknown_lines


DRYRUN = """\
INFO:torch_tensorrt.dynamo._DryRunTracker:
++++++++++++++ Dry-Run Results for Graph +++++++++++++++++

The graph consists of 3 Total Operators, of which 2 operators are supported, 66.67% coverage

The following ops are currently unsupported or excluded from conversion, and are listed with their op-count in the graph:
 torch.ops.aten.mul.Tensor: 1

The following nodes are currently set to run in Torch:
Node: torch.ops.aten.mul.Tensor, with layer location: /mul
Note: Some of the above nodes may be supported, but were not included in a TRT graph by the partitioner

Compiled with: CompilationSettings(enabled_precisions={<dtype.f32: 7>}, workspace_size=0, min_block_size=1, torch_executed_ops={'torch.ops.aten.mul.Tensor'})

  Graph Structure:

   Inputs: List[Tensor: (1, 3, 224, 224)@float32]
    ...
    TRT Engine #1 - Submodule name: _run_on_acc_0
     Engine Inputs: List[Tensor: (1, 3, 224, 224)@float32]
     Number of Operators in Engine: 1
     Engine Outputs: List[Tensor: (1, 3, 224, 224)@float32]
"""


def test_dry_run_report_coverage_torch_nodes_and_engines():
    found = _by_kind(DRYRUN)
    (part,) = found["torchtrt_partition"]
    assert part.detail["coverage_pct"] == 66.67 and part.detail["total_ops"] == 3
    assert part.detail["settings"]["torch_executed_ops"] == "{'torch.ops.aten.mul.Tensor'}"
    (fb,) = found["torchtrt_fallback"]
    assert fb.detail["ops"] == {"torch.ops.aten.mul.Tensor": 1}
    assert fb.detail["nodes"] == [{"op": "torch.ops.aten.mul.Tensor", "location": "/mul"}]
    (engine,) = found["torchtrt_engine"]
    assert engine.detail["submodule"] == "_run_on_acc_0" and engine.detail["operators"] == 1


def test_torchscript_unsupported_operators_and_converter_rejections():
    ts = (
        "ERROR: [Torch-TensorRT] - Method requested cannot be compiled by Torch-TensorRT.TorchScript.\n"
        "Unsupported operators listed below:\n"
        "  - aten::__contains__.str_list(str[] l, str item) -> (bool)\n"
        "You can either implement converters for these ops in your application or request implementation\n"
    )
    (fb,) = _by_kind(ts)["torchtrt_fallback"]
    assert fb.detail["ops"] == {"aten::__contains__.str_list": 1}
    rejected = (
        "DEBUG:torch_tensorrt.dynamo.conversion.aten_ops_converters:_to_copy converter rejected node _to_copy_6 "
        "with dtype torch.int64\n"
    )
    (fb,) = _by_kind(rejected)["torchtrt_fallback"]
    assert fb.detail["rejected"] == [{"converter": "_to_copy", "node": "_to_copy_6", "reason": "dtype torch.int64"}]
    assert fb.layers == ("_to_copy_6",)


def test_a_subgraph_given_back_to_pytorch_whole_is_high():
    # dynamo/backend/backends.py's warning when TensorRT conversion of a torch.compile subgraph fails (as quoted in a
    # public report, after a Myelin error)
    text = (
        "ERROR: [Torch-TensorRT] - ICudaEngine::createExecutionContext: Error Code 1: Myelin\n"
        "WARNING:torch_tensorrt.dynamo.backend.backends:TRT conversion failed on the subgraph. See trace above. "
        "Returning GraphModule forward instead.\n"
    )
    (fb,) = _by_kind(text)["torchtrt_fallback"]
    assert fb.severity == "high" and fb.detail["subgraphs_given_back"] == 1
    assert "run in PyTorch whole" in fb.message


def test_torchscript_partitioning_segments():
    # Torch-TensorRT 1.x TorchScript partitioning (core/partitioning/SegmentedBlock's debug print)
    text = """\
DEBUG: [Torch-TensorRT] - Segment Block @0:
    Target: TensorRT

    Graph: graph(%x.1 : Tensor):
  %3 : Tensor = aten::relu(%x.1)
  return (%3)

DEBUG: [Torch-TensorRT] - Segment Block @1:
    Target: Torch

    Graph: graph(%3 : Tensor):
  %5 : bool = aten::__contains__(%3)
  return (%5)
"""
    found = _by_kind(text)
    (part,) = found["torchtrt_partition"]
    assert part.detail["segments"] == {"TensorRT": 1, "Torch": 1}
    (fb,) = found["torchtrt_fallback"]
    assert fb.detail["torch_segments"] == [1] and "1 segment(s) run in Torch (@1)" in fb.message
