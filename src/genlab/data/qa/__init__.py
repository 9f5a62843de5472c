"""Semi-supervised extractive QA data (GDAN, spec gdan.md §5): SQuAD v1.1 under the thesis' protocol (article-held-out
test split, labelling rates), unlabelled paragraphs with answer chunks, the answer extractor, the word tokenizer
with character offsets, and the offline minis (real Wikipedia text; a synthetic unit-test fixture)."""
