"""Stages: each a `run(context) -> result` function registered in `trtverify.config.registry.STAGES`."""
