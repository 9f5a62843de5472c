"""Rich progress bar on interactive terminals; Lightning's plain bar when output is a file or CI log."""

from __future__ import annotations

import sys

from pytorch_lightning.callbacks import RichProgressBar, TQDMProgressBar


def make_progress_bar(refresh_rate: int = 1):
    if sys.stdout.isatty():
        return RichProgressBar(refresh_rate=refresh_rate)
    return TQDMProgressBar(refresh_rate=max(refresh_rate, 50))
