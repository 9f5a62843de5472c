"""Lightning callbacks and plugins: checkpoints, throughput/MFU, RNG state, NaN guard, progress, W&B."""
