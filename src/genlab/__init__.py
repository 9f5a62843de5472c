"""genlab: generative pretraining and semi-supervised learning, reproduced."""

__version__ = "0.1.0"
