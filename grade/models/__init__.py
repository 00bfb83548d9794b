"""Models and text generation: loading, the architectures' MLP table, the one decoding path, the llama.cpp
backend, sampling and cancellation. Layer: engine; imports engine folders only.
"""
