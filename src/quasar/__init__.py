"""Quasar: Pulsar's semantics and wire protocol on RocketMQ-style storage, in one Python package."""

__version__ = "0.1.0"
