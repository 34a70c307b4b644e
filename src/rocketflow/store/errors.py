"""Errors raised by the store."""

from __future__ import annotations

from rocketflow.errors import RocketflowError


class StoreError(RocketflowError):
    """Base class of store failures."""


class StoreLockedError(StoreError):
    """Another process (or store instance) holds the store directory's lock file."""


class StoreCorruptError(StoreError):
    """Files on disk that cannot be loaded (wrong sizes, bad names, unreadable checkpoint)."""


class StoreNotRunningError(StoreError):
    """An operation that needs a started store was called before `start()` or after `shutdown()`."""
