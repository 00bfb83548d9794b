"""Steps of a reasoning trace: the step checks, the suspect step (locate) and the step-error benchmark.
Layer: engine; imports engine folders only.
"""
