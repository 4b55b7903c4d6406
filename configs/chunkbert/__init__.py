"""Configs of the chunkbert experiments."""
