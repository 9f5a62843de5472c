"""LightningModules: one objective family each (LM, PLM/MLM, finetuning heads, SSL GANs, Planetoid ...)."""
