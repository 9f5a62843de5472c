"""Planetoid graph data: the ind.* format, context sampling and the DataModule."""
