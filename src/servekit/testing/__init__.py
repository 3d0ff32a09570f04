"""Test doubles that ship with servekit: a fake runtime and servable, and helpers to build repositories."""

from servekit.testing.fakes import FakeLoader, FakeServable, write_fake_version

__all__ = ["FakeLoader", "FakeServable", "write_fake_version"]
