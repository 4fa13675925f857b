"""The client's version: its distribution's, sent in the User-Agent header."""

__version__ = "0.1.0"
