"""Architectures: plain ``nn.Module``s with typed constructor arguments, one file each (no Lightning, Hydra or data
code)."""
