"""Suite files: pydantic models and the located YAML loader."""

from trtverify.config.loader import LoadedSuite, load_suite

__all__ = ["LoadedSuite", "load_suite"]
