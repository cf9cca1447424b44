"""A/B runs: the vanilla (observed) and the OTCA side of one launch, each in its own run folder."""
