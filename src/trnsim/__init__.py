"""trnsim: a software Trainium. Simulates AWS Neuron accelerators' numerics and timing."""

__version__ = "0.1.0"
