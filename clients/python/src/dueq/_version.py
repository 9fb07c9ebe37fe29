"""This client's version: the server's (the Cargo workspace version)."""

__version__ = "0.1.0"
