"""Shared fixtures. Tests mirror src/trnsim; each layer's tests need only that layer and below."""
