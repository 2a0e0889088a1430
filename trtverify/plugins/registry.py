"""The plugin references trtverify ships, by the node's op_type.

A plugin reference is a callable that receives the node's inputs as numpy arrays (positionally, in the node's input
order; an omitted optional input is None) and the node's attributes as keyword arguments, and returns its output(s)
in the node's output order (one array, or a tuple of arrays). TensorRT's ONNX parser finds a plugin by op_type,
whatever the node's domain, and so does trtverify. What each one computes: docs/plugins.md, "Built-in references".
"""

from __future__ import annotations

# op_type -> 'module:callable' (imported on first use)
BUILTIN: dict[str, str] = {
    "EfficientNMS_TRT": "trtverify.plugins.efficientnms:efficient_nms",
    "BatchedNMS_TRT": "trtverify.plugins.batchednms:batched_nms",
    "BatchedNMSDynamic_TRT": "trtverify.plugins.batchednms:batched_nms_dynamic",
    "TRTBatchedNMS": "trtverify.plugins.trtbatchednms:trt_batched_nms",
    "ROIAlign_TRT": "trtverify.plugins.roialign:roi_align",
}
