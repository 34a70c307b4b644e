"""Producing: `Producer`, `TransactionProducer` and request-reply (public names are exported by `rocketflow.client`)."""
