"""Quasar spark package."""
