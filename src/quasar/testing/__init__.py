"""Quasar testing package."""
