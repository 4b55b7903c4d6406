"""Configs of the slstm experiments."""
