"""trtverify: an accuracy gate and debugger for models deployed with NVIDIA TensorRT.

Importing this package is cheap: it never imports torch, tensorrt or onnxruntime.
"""

__version__ = "0.1.0"
