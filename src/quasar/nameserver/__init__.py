"""Quasar nameserver package."""
