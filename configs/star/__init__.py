"""Configs of the star experiments."""
