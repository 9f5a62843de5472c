"""Analyses of trained models (the MoS paper's softmax-bottleneck measurements)."""
