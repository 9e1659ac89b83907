"""Operators of the provider."""
