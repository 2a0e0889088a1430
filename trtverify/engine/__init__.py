"""Engine audit and diff from trtexec exports: what TensorRT built, where the time goes, what a rebuild changed."""
