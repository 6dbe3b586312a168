"""Quasar broker package."""
