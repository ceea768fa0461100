"""Shared fakes and harness pieces of the test suite (tests/README.md): test modules import
from here, never from each other (tests/project/test_layout.py holds that)."""
