"""LightningModules, one per task family; each exposes what the pruning callback needs (see `base`)."""
