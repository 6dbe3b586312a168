"""Quasar protocol package."""
