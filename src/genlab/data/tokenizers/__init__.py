"""Tokenizers: SentencePiece (XLNet pieces), WordPiece (BERT checkpoints), a checkpoint's own."""
