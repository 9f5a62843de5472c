"""Semi-supervised extractive QA data (GDAN, Yang thesis §3.2.5): SQuAD v1.1 under the thesis' protocol
(article-held-out test split, labelling rates), unlabelled paragraphs with answer chunks, the answer extractor, the word
tokenizer with character offsets, and the offline minis (real Wikipedia text; a synthetic unit-test fixture)."""
