"""Message families beyond the original rules: DLA placement listings, plugins, implementations, API and
deprecation messages, build time, TF-TRT and ONNX Runtime TensorRT EP fallbacks. Kinds: config.findings.FAMILY_KINDS."""

from __future__ import annotations

from trtverify.buildlog.findings import Rule

RULES: tuple[Rule, ...] = ()
