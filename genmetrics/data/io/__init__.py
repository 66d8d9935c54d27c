"""Image input: the image contract, the decoding pipeline, batching and decoding workers."""
