"""Fixtures shared by the end-to-end tests."""

from e2e._paho_peer import peers

__all__ = ["peers"]
