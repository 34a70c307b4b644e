"""``rocketmq.client`` of Apache's ``rocketmq-client-python``, over rocketflow's client.

```python
from rocketflow.compat.rocketmq.client import Producer, PushConsumer, Message, ConsumeStatus

producer = Producer("PID-XXX")
producer.set_name_server_address("127.0.0.1:9876")
producer.start()
msg = Message("YOUR-TOPIC")
msg.set_keys("XXX"); msg.set_tags("XXX"); msg.set_body("XXXX")
ret = producer.send_sync(msg)
print(ret.status, ret.msg_id, ret.offset)
producer.shutdown()
```

Every class maps its calls onto rocketflow's own (`rocketflow.Producer`, `rocketflow.PushConsumer`,
`rocketflow.PullConsumer`, `rocketflow.TransactionProducer`): settings are collected until
``start()``, which builds and starts the rocketflow client; errors come back as the exception classes
of `rocketflow.compat.rocketmq.exceptions`. Defaults are those of the C++ client the original wraps
(a 3 s send timeout, 128 KiB maximum message size, 5 send attempts, one consume thread per CPU, one
message per callback). The 2.0.x API is the reference; the 0.4.x spellings are there too. Where
the two disagree on behaviour, a push consumer whose name server was set with the 0.4.x spelling
(``set_namesrv_addr`` / ``set_namesrv_domain``) gets 0.4.x's callback contract (the callback's return
value is ignored, only an exception means "consume again later"); otherwise 2.0.x's (the callback
must return a `ConsumeStatus`). docs/migrating-from-rocketmq-client-python.md lists every name and
every difference.

The modules: `.message` (messages, send results, statuses), `.producer` (`Producer`),
`.transaction` (`TransactionMQProducer`), `.push_consumer`, `.pull_consumer` (0.4.x) and `._common`
(argument coercion, connection settings); this package re-exports their public names.
"""

from __future__ import annotations

import logging

from rocketflow.compat.rocketmq.client._common import DOMAIN_FETCH_TIMEOUT as DOMAIN_FETCH_TIMEOUT
from rocketflow.compat.rocketmq.client._common import PY2, binary_type, maybe_decode, text_type
from rocketflow.compat.rocketmq.client.message import (
    ConsumeStatus,
    Message,
    MessageModel,
    ReceivedMessage,
    RecvMessage,
    SendResult,
    SendStatus,
    TransactionStatus,
)
from rocketflow.compat.rocketmq.client.producer import CPP_ASYNC_SEND_RETRIES as CPP_ASYNC_SEND_RETRIES
from rocketflow.compat.rocketmq.client.producer import CPP_COMPRESS_LEVEL as CPP_COMPRESS_LEVEL
from rocketflow.compat.rocketmq.client.producer import CPP_MAX_MESSAGE_SIZE as CPP_MAX_MESSAGE_SIZE
from rocketflow.compat.rocketmq.client.producer import CPP_SEND_ATTEMPTS as CPP_SEND_ATTEMPTS
from rocketflow.compat.rocketmq.client.producer import CPP_SEND_MSG_TIMEOUT_MS as CPP_SEND_MSG_TIMEOUT_MS
from rocketflow.compat.rocketmq.client.producer import CPP_SHARDING_KEY_RETRIES as CPP_SHARDING_KEY_RETRIES
from rocketflow.compat.rocketmq.client.producer import Producer, hashing_queue_selector
from rocketflow.compat.rocketmq.client.producer import cxx_string_hash as cxx_string_hash
from rocketflow.compat.rocketmq.client.pull_consumer import PULL_WAIT as PULL_WAIT
from rocketflow.compat.rocketmq.client.pull_consumer import PullConsumer
from rocketflow.compat.rocketmq.client.push_consumer import PushConsumer
from rocketflow.compat.rocketmq.client.transaction import TransactionMQProducer
from rocketflow.compat.rocketmq.consts import MessageProperty
from rocketflow.compat.rocketmq.exceptions import ConsumerException as ConsumerException
from rocketflow.compat.rocketmq.exceptions import NullPointerException, ProducerSendAsyncFailed, PushConsumerStartFailed
from rocketflow.compat.rocketmq.exceptions import ProducerSendOnewayFailed as ProducerSendOnewayFailed
from rocketflow.compat.rocketmq.exceptions import ProducerSendOrderlyFailed as ProducerSendOrderlyFailed
from rocketflow.compat.rocketmq.exceptions import ProducerSendSyncFailed as ProducerSendSyncFailed
from rocketflow.compat.rocketmq.exceptions import ProducerStartFailed as ProducerStartFailed
from rocketflow.compat.rocketmq.exceptions import PullConsumerFetchMessageFailed as PullConsumerFetchMessageFailed
from rocketflow.compat.rocketmq.exceptions import PullConsumerFetchMQFailed as PullConsumerFetchMQFailed
from rocketflow.compat.rocketmq.exceptions import PullConsumerStartFailed as PullConsumerStartFailed
from rocketflow.compat.rocketmq.exceptions import RocketMQException as RocketMQException

#: The parent of the modules' loggers (``logging.getLogger(__name__)`` in each): set its level or
#: handlers to govern them all, as before the split.
logger = logging.getLogger(__name__)

__all__ = [
    "PY2",
    "ConsumeStatus",
    "Message",
    "MessageModel",
    "MessageProperty",
    "NullPointerException",
    "Producer",
    "ProducerSendAsyncFailed",
    "PullConsumer",
    "PushConsumer",
    "PushConsumerStartFailed",
    "ReceivedMessage",
    "RecvMessage",
    "SendResult",
    "SendStatus",
    "TransactionMQProducer",
    "TransactionStatus",
    "binary_type",
    "hashing_queue_selector",
    "maybe_decode",
    "text_type",
]
