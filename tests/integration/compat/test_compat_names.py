"""The module offers every public name of the real packages' ``rocketmq.client``, ``.exceptions`` and
``.consts`` (PyPI ``rocketmq-client-python`` 2.0.0 and ``rocketmq`` 0.4.4), with the same kind of object
and the same signatures.

The expected names were read once from the two releases' sources (top-level definitions and imports
not starting with ``_``); what this layer leaves out on purpose is listed with the reason.
"""

from __future__ import annotations

import enum
import inspect
from typing import Any

import pytest

from rocketflow.compat.rocketmq import client, consts, exceptions

#: the top-level public names of ``rocketmq/client.py`` in 2.0.0 and in 0.4.4
CLIENT_2_0 = {
    "ConsumeStatus", "IntEnum", "LOCAL_TRANSACTION_EXECUTE_CALLBACK", "MSG_CALLBACK_FUNC", "Message", "MessageModel",
    "MessageProperty", "NullPointerException", "PY2", "Producer", "PushConsumer", "ReceivedMessage", "SendResult",
    "SendStatus", "TRANSACTION_CHECK_CALLBACK", "TransactionMQProducer", "TransactionStatus", "binary_type", "ctypes",
    "dll", "ffi_check", "maybe_decode", "namedtuple", "sys", "text_type",
}
CLIENT_0_4 = {
    "IntEnum", "MSG_CALLBACK_FUNC", "Message", "MessageModel", "MessageProperty", "NullPointerException", "POINTER",
    "PY2", "Producer", "ProducerSendAsyncFailed", "PullConsumer", "PushConsumer", "PushConsumerStartFailed",
    "QUEUE_SELECTOR_CALLBACK", "RecvMessage", "SendResult", "SendStatus", "binary_type", "c_int", "c_void_p",
    "ctypes", "dll", "ffi_check", "hashing_queue_selector", "maybe_decode", "namedtuple", "sys", "text_type",
}
EXCEPTIONS_2_0 = {
    "ConsumerException", "MallocFailed", "NullPointerException", "ProducerException", "ProducerSendAsyncFailed",
    "ProducerSendOnewayFailed", "ProducerSendOrderlyFailed", "ProducerSendSyncFailed", "ProducerStartFailed",
    "PushConsumerStartFailed", "RocketMQException", "dll", "ffi_check", "re",
}
EXCEPTIONS_0_4 = EXCEPTIONS_2_0 | {"PullConsumerFetchMQFailed", "PullConsumerFetchMessageFailed",
                                   "PullConsumerStartFailed"}
CONSTS = {"Enum", "MessageProperty"}
#: imports of the standard library, and the bindings of the native library this layer replaces
NOT_OFFERED = {
    "IntEnum", "namedtuple", "sys", "ctypes", "POINTER", "c_int", "c_void_p", "Enum", "re",
    "dll", "ffi_check", "MSG_CALLBACK_FUNC", "QUEUE_SELECTOR_CALLBACK", "TRANSACTION_CHECK_CALLBACK",
    "LOCAL_TRANSACTION_EXECUTE_CALLBACK",
}

#: public methods (and properties) of the classes, union of both releases
METHODS: dict[str, set[str]] = {
    "Message": {"set_keys", "set_tags", "set_body", "set_property", "set_delay_time_level"},
    "ReceivedMessage": {"topic", "tags", "keys", "body", "id", "delay_time_level", "queue_id", "reconsume_times",
                        "store_size", "born_timestamp", "store_timestamp", "queue_offset", "commit_log_offset",
                        "prepared_transaction_offset", "get_property", "__getitem__", "__str__", "__bytes__"},
    "Producer": {"send_sync", "send_oneway", "send_orderly_with_sharding_key", "set_group", "set_name_server_address",
                 "set_name_server_domain", "set_session_credentials", "set_timeout", "set_compress_level",
                 "set_max_message_size", "start", "shutdown", "__enter__", "__exit__",
                 # 0.4.4
                 "send_batch", "send_async", "send_oneway_orderly", "send_orderly", "set_namesrv_addr",
                 "set_namesrv_domain"},
    "TransactionMQProducer": {"send_message_in_transaction", "set_name_server_address", "start"},
    "PushConsumer": {"set_message_model", "start", "shutdown", "set_group", "set_name_server_address",
                     "set_name_server_domain", "set_session_credentials", "subscribe", "set_thread_count",
                     "set_message_batch_max_size", "set_instance_name", "__enter__", "__exit__",
                     "set_namesrv_addr", "set_namesrv_domain"},
    "PullConsumer": {"start", "shutdown", "set_group", "set_namesrv_addr", "set_namesrv_domain",
                     "set_session_credentials", "get_message_queue_offset", "set_message_queue_offset", "pull",
                     "offset_table"},
}

#: parameter names of the calls whose arguments users pass by keyword
SIGNATURES: dict[str, list[str]] = {
    "Producer.__init__": ["self", "group_id", "orderly", "timeout", "compress_level", "max_message_size"],
    "TransactionMQProducer.__init__": ["self", "group_id", "checker_callback", "user_args", "timeout",
                                       "compress_level", "max_message_size"],
    "TransactionMQProducer.send_message_in_transaction": ["self", "message", "local_execute", "user_args"],
    "PushConsumer.__init__": ["self", "group_id", "orderly", "message_model"],
    "PushConsumer.subscribe": ["self", "topic", "callback", "expression"],
    "Producer.send_orderly_with_sharding_key": ["self", "msg", "sharding_key"],
    "Producer.send_orderly": ["self", "msg", "arg", "retry_times", "queue_selector"],
    "Producer.send_oneway_orderly": ["self", "msg", "arg", "queue_selector"],
    "Producer.send_async": ["self", "msg", "success_callback", "exception_callback"],
    "Producer.set_session_credentials": ["self", "access_key", "access_secret", "channel"],
    "PullConsumer.pull": ["self", "topic", "expression", "max_num"],
    "ReceivedMessage.get_property": ["self", "prop"],
}


@pytest.mark.parametrize(("module", "expected"), [
    (client, CLIENT_2_0 | CLIENT_0_4),
    (exceptions, EXCEPTIONS_2_0 | EXCEPTIONS_0_4),
    (consts, CONSTS),
], ids=["client", "exceptions", "consts"])
def test_every_public_name_is_offered(module: Any, expected: set[str]) -> None:
    missing = sorted(name for name in expected - NOT_OFFERED if not hasattr(module, name))
    assert not missing, f"{module.__name__} lacks {missing}"


@pytest.mark.parametrize("class_name", sorted(METHODS))
def test_every_method_is_offered(class_name: str) -> None:
    cls = getattr(client, class_name)
    missing = sorted(name for name in METHODS[class_name] if not hasattr(cls, name))
    assert not missing, f"{class_name} lacks {missing}"


@pytest.mark.parametrize("qualified", sorted(SIGNATURES))
def test_signatures(qualified: str) -> None:
    class_name, method = qualified.split(".")
    parameters = list(inspect.signature(getattr(getattr(client, class_name), method)).parameters)
    assert parameters == SIGNATURES[qualified]


def test_enums_have_the_native_values() -> None:
    assert {m.name: m.value for m in client.SendStatus} == {
        "OK": 0, "FLUSH_DISK_TIMEOUT": 1, "FLUSH_SLAVE_TIMEOUT": 2, "SLAVE_NOT_AVAILABLE": 3}
    assert {m.name: m.value for m in client.TransactionStatus} == {"COMMIT": 0, "ROLLBACK": 1, "UNKNOWN": 2}
    assert {m.name: m.value for m in client.ConsumeStatus} == {"CONSUME_SUCCESS": 0, "RECONSUME_LATER": 1}
    assert {m.name: m.value for m in client.MessageModel} == {"BROADCASTING": 0, "CLUSTERING": 1}
    for enum_class in (client.SendStatus, client.TransactionStatus, client.ConsumeStatus, client.MessageModel):
        assert issubclass(enum_class, enum.IntEnum)
    assert consts.MessageProperty.UNIQ_CLIENT_MESSAGE_ID_KEYIDX.value == "UNIQ_KEY"
    assert consts.MessageProperty.WAIT_STORE_MSG_OK.value == "WAIT"
    assert len(consts.MessageProperty) == 22


def test_send_result_is_the_named_tuple() -> None:
    result = client.SendResult(client.SendStatus.OK, "id", 7)
    assert result._fields == ("status", "msg_id", "offset")
    status, msg_id, offset = result
    assert (status, msg_id, offset) == (client.SendStatus.OK, "id", 7)
    assert repr(result) == "SendResult(status=<SendStatus.OK: 0>, msg_id='id', offset=7)"


def test_exception_hierarchy() -> None:
    base = exceptions.RocketMQException
    producer_errors = ["ProducerStartFailed", "ProducerSendSyncFailed", "ProducerSendOnewayFailed",
                       "ProducerSendOrderlyFailed", "ProducerSendAsyncFailed"]
    consumer_errors = ["PushConsumerStartFailed", "PullConsumerStartFailed", "PullConsumerFetchMQFailed",
                       "PullConsumerFetchMessageFailed"]
    for name in producer_errors:
        assert issubclass(getattr(exceptions, name), exceptions.ProducerException)
    for name in consumer_errors:
        assert issubclass(getattr(exceptions, name), exceptions.ConsumerException)
    for name in ("NullPointerException", "MallocFailed", "ProducerException", "ConsumerException"):
        assert issubclass(getattr(exceptions, name), base)
    failure = exceptions.ProducerSendAsyncFailed("msg", 1, "file.cpp", 12, "MQClientException")
    assert (str(failure), failure.error, failure.file, failure.line, failure.type) == (
        "msg", 1, "file.cpp", 12, "MQClientException")
    assert client.NullPointerException is exceptions.NullPointerException
    assert client.PushConsumerStartFailed is exceptions.PushConsumerStartFailed


def test_python2_names_and_maybe_decode() -> None:
    assert client.PY2 is False
    assert (client.text_type, client.binary_type) == (str, bytes)
    assert client.maybe_decode(b"caf\xc3\xa9") == "café"
    assert client.maybe_decode("x") == "x"
    with pytest.raises(TypeError):
        client.maybe_decode(3)  # type: ignore[arg-type]
    assert client.RecvMessage.__mro__[1] is client.ReceivedMessage


def test_sharding_key_hash_is_libstdcxx_std_hash() -> None:
    """Values printed by ``std::hash<std::string>`` of g++ 12 (libstdc++, x86_64 Linux)."""
    printed = {"": 6142509188972423790, "a": 4993892634952068459, "orderId": 14658593289012272564,
               "order-1": 1888478096483860501, "12345678": 10113836418918046885,
               "123456789": 12315982496267331008, "sharding key with spaces": 4600598727903929637,
               "中文": 9854956157463167294, "k0": 14216425451484234765}
    assert {key: client.cxx_string_hash(key.encode()) for key in printed} == printed
