"""Quasar cli package."""
