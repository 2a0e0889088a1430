"""Pure-Python analysis of TensorRT build logs (no TensorRT import): `trtverify.buildlog.parser.parse`."""
