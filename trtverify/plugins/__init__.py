"""TensorRT plugin nodes in ONNX graphs: numpy references for the plugins detectors ship with, and users' own."""
