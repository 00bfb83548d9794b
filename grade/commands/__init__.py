"""One module per CLI command; see :mod:`grade.commands.cli`."""
