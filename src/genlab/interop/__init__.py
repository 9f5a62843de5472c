"""Import/export of published checkpoints (Hugging Face layouts)."""
