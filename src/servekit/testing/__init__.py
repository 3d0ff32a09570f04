"""Test doubles that ship with servekit: a fake runtime and servable, and helpers to build repositories."""

from servekit.testing.fakes import FakeLoader, FakeRuntime, FakeServable, write_fake_version
from servekit.testing.memory_storage import InMemoryStorage as InMemoryStorage

__all__ = ["FakeLoader", "FakeRuntime", "FakeServable", "write_fake_version"]
