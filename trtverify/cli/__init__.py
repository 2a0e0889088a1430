"""The command line: `main` holds the command group and registers the command modules beside it."""
