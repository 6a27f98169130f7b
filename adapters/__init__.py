"""Chorus."""
