"""Quasar ledger package."""
