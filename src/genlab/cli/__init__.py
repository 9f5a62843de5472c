"""Entry points: Hydra mains, config validation, exit codes."""
