"""Synthetic 2-D distributions of the CEGAN and bad-GAN case studies."""
