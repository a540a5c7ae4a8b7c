"""SAGE engine: experience memory (ATU, UGC) and kernel evaluation."""

__version__ = "0.1.0"
