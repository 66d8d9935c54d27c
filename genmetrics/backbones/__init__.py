"""Backbone loading (open_clip, transformers VLMs, peft adapters) and the weights policy."""
