"""Quasar client package."""
