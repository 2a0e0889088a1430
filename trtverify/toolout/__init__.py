"""Readers of what TensorRT's tools print, shared by the build-log parser (trtverify.buildlog) and the engine audit
(trtverify.engine): trtexec's performance summary, its per-layer profile tables and layer listings, and its
timing export. One reader per format."""
