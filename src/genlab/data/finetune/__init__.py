"""Finetuning benchmarks (GLUE, SQuAD, RACE, document classification): readers, downloads, minis."""
