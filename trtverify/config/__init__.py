"""Suite files: the pydantic models of the suite (every backend's options included), the registry of
what a suite can name, and the located YAML loader (`trtverify.config.loader.load_suite`)."""
