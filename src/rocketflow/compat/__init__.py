"""Drop-in APIs of other RocketMQ clients, as thin layers over rocketflow's own client.

`rocketflow.compat.rocketmq`: the API of Apache's ``rocketmq-client-python`` (PyPI
``rocketmq-client-python`` 2.0.x and its predecessor ``rocketmq`` 0.4.x), see
docs/migrating-from-rocketmq-client-python.md.
"""
