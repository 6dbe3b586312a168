"""Quasar replication package."""
