"""The ONNX readers and rewriters: the protobuf wire reader, the graph index, the weightless light model, I/O
information and FP16/BF16 emulation."""
