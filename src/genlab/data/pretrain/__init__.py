"""Plain-text pretraining corpora and the XLNet (PLM), BERT (MLM) and DAE example builders."""
