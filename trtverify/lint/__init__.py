"""Static precision lint of a candidate ONNX model (`trtverify.lint.linter.lint_candidate`)."""
