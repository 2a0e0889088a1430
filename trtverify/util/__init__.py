"""Small utilities every layer may use: errors and exit codes, atomic files and locks, records, registries, hooks,
optional dependencies, the environment, and the tensor store."""
