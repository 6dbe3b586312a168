"""Quasar storage package."""
