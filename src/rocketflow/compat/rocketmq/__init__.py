"""The API of Apache's ``rocketmq-client-python`` (``rocketmq.client``, ``.exceptions``, ``.consts``)
in pure Python, over rocketflow's client: replace ``from rocketmq.client import ...`` by
``from rocketflow.compat.rocketmq.client import ...``.

Names, signatures, return types and behaviour are those of the 2.0.x release, plus the 0.4.x
spellings where they differ (``set_namesrv_addr``, ``send_orderly``, ``PullConsumer``, ...); the
differences are listed in docs/migrating-from-rocketmq-client-python.md.
"""
