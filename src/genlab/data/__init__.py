"""Data layer: sources (mini / path / download), readers per real file format, tokenizers, DataModules."""
