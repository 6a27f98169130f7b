"""Vendor-neutral LLM providers."""
