"""Suites written for the user: the ad-hoc suite of a command line (`trtverify layerwise`, `repair`) and
`trtverify init`'s commented suite for a model."""
