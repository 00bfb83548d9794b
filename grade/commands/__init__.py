"""The command line, ``python -m grade``: its parser (cli) and one module per command.
Layer: commands; imports any layer below it (engine, batch, learning).
"""
