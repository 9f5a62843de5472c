"""Where a dataset's files come from: the mini / path / download tiers."""
