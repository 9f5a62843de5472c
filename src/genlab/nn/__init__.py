"""Reusable layers. A layer here does not know which model uses it."""
