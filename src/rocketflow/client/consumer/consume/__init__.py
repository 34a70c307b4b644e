"""Calling the listeners: concurrent, orderly and key-ordered consume services, their contexts and hooks."""
