"""The verdict on a question: the probe, the detectors beside it (with their baselines), their files, training
sets and what a probe reads. Layer: learning; imports the engine folders and batch/.
"""
