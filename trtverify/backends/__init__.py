"""Backends: one base class (`trtverify.backends.base.Backend`) with a lifecycle and declared
capabilities; the registry of names lives in `trtverify.config.registry.BACKENDS`, so naming a
backend in a suite imports nothing heavy."""
