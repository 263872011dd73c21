"""Integrations with web frameworks; each module imports its framework only when it is used."""
