"""Shared by every layer: the error types, safe reading and atomic writing of files (io), the metrics of scores.
Layer: engine, the bottom one; imports nothing else of the project.
"""
