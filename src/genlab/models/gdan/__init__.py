"""Semi-supervised QA with Generative Domain-Adaptive Nets (Yang thesis §3.2): reader D, question generator G."""

from genlab.models.gdan.features import TAG_GEN, TAG_TRUE
from genlab.models.gdan.generator import Encoded, Generated, QuestionGenerator, copy_mixture
from genlab.models.gdan.reader import GAReader, ReaderOutput, gated_attention
from genlab.models.gdan.system import GDAN, DomainClassifier

__all__ = ["GDAN", "TAG_GEN", "TAG_TRUE", "DomainClassifier", "Encoded", "GAReader", "Generated",
           "QuestionGenerator", "ReaderOutput", "copy_mixture", "gated_attention"]
