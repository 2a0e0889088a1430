"""Lowering an FP32 ONNX model to FP16 (with FP32 islands) or to TensorRT-compatible INT8 Q/DQ."""
