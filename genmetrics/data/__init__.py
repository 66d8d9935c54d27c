"""Image loading and validation, datasets, batching, caching and device helpers shared by all families."""
