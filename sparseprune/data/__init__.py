"""LightningDataModules, one per dataset; each tells the model what it needs through `model_kwargs`."""
