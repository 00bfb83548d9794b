"""GRADE on one question: gradient capture, the losses, the stable rank of the gradients' spectra, the analysis
with its result, and the published reference recipe. Layer: engine; imports engine folders only.
"""
