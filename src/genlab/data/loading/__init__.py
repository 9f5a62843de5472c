"""How batches reach the training process: DataLoader worker, pinning and persistence settings."""
