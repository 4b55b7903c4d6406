"""Configs of the ran experiments."""
