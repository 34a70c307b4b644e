"""Which queues a consumer holds: rebalance, broker queue locks and where a new queue starts."""
