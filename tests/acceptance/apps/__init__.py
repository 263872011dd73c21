"""Small apps and helpers for the worker acceptance tests (run by real `workhorse worker`s)."""
