"""Language-modelling corpora: real-format readers, vocabularies, token caches, ordered streams, minis."""
