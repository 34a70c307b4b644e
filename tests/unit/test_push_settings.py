"""`PushConsumer` construction: defaults, validation with clear errors, subscriptions, listeners."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from rocketflow import PullConsumer, PushConsumer
from rocketflow.client import (
    MAX_RECONSUME_TIMES_UNLIMITED,
    AllocateMessageQueueAveragelyByCircle,
    ClientConfig,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    MessageModel,
    MQClientError,
    PushConsumerSettings,
)
from rocketflow.client.consumer.consume.context import CMResult, ConsumeMessageDirectlyResult, is_async_callable
from rocketflow.client.consumer.options import parse_consume_timestamp
from rocketflow.protocol.bodies import ConsumeType
from rocketflow.remoting.errors import BodyDecodeError

NAMESRV = "127.0.0.1:9876"


def test_defaults_are_rocketmqs() -> None:
    settings = PushConsumerSettings()
    assert (settings.consume_thread_min, settings.consume_thread_max) == (20, 20)
    assert settings.pull_threshold_for_queue == 1000 and settings.pull_threshold_size_for_queue == 100
    assert settings.pull_threshold_for_topic == -1 and settings.pull_threshold_size_for_topic == -1
    assert settings.consume_concurrently_max_span == 2000 and settings.pull_batch_size == 32
    assert settings.pull_interval == 0 and settings.consume_message_batch_max_size == 1
    assert settings.consume_timeout == 900 and settings.suspend_current_queue_time_millis == 1000
    assert settings.max_reconsume_times == -1 and settings.post_subscription_when_pull is False
    assert (settings.lock_interval, settings.lock_first_delay, settings.lock_max_live_time) == (20, 1, 30)
    assert (settings.pull_max_idle_time, settings.unlock_delay_time, settings.max_time_consume_continuously) == (
        120, 20, 60)
    consumer = PushConsumer("cg", namesrv=NAMESRV)
    assert consumer.message_model is MessageModel.CLUSTERING
    assert consumer.consume_from is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert type(consumer.allocate_strategy).__name__ == "AllocateMessageQueueAveragely"
    assert consumer.effective_max_reconsume_times == 16
    assert consumer.client_config.rebalance_interval == 20
    # consume_timestamp defaults to half an hour ago
    assert abs(consumer.consume_timestamp_ms / 1000 - (time.time() - 1800)) < 5


def test_settings_reach_their_owners() -> None:
    consumer = PushConsumer("cg", namesrv=NAMESRV, message_model=MessageModel.BROADCASTING,
                            consume_from=ConsumeFromWhere.CONSUME_FROM_TIMESTAMP,
                            consume_timestamp=datetime(2024, 1, 2, 3, 4, 5),
                            allocate_strategy=AllocateMessageQueueAveragelyByCircle(), instance_name="x",
                            rebalance_interval=2.5, pull_batch_size=8,
                            max_reconsume_times=MAX_RECONSUME_TIMES_UNLIMITED)
    assert consumer.consume_timestamp == "20240102030405"
    assert consumer.client_config.instance_name == "x" and consumer.client_config.rebalance_interval == 2.5
    assert consumer.settings.pull_batch_size == 8
    assert consumer.effective_max_reconsume_times == 2**31 - 1
    data = consumer.consumer_data()
    assert data.consume_type is ConsumeType.CONSUME_PASSIVELY and data.message_model is MessageModel.BROADCASTING
    assert data.group_name == "cg" and data.subscription_data_set == []


def test_pull_exception_delay_defaults_per_consumer() -> None:
    """3000 ms for push consumers (RocketMQ's push consumer default), ClientConfig's 1000 ms for pull consumers;
    a value set explicitly, even 1000, wins."""
    assert ClientConfig().pull_time_delay_mills_when_exception == 1000
    assert PushConsumer("cg", namesrv=NAMESRV).client_config.pull_time_delay_mills_when_exception == 3000
    assert PushConsumer("cg", client_config=ClientConfig(namesrv_addr=NAMESRV)) \
        .client_config.pull_time_delay_mills_when_exception == 3000
    assert PullConsumer("cg", namesrv=NAMESRV).client_config.pull_time_delay_mills_when_exception == 1000
    explicit = PushConsumer("cg", namesrv=NAMESRV, pull_time_delay_mills_when_exception=1000)
    assert explicit.client_config.pull_time_delay_mills_when_exception == 1000
    from_config = PushConsumer("cg", client_config=ClientConfig(namesrv_addr=NAMESRV,
                                                                pull_time_delay_mills_when_exception=1000))
    assert from_config.client_config.pull_time_delay_mills_when_exception == 1000
    assert PushConsumer("cg", namesrv=NAMESRV, pull_time_delay_mills_when_exception=250) \
        .client_config.pull_time_delay_mills_when_exception == 250


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"consume_thread_min": 0}, "consume_thread_min"),
    ({"consume_thread_min": 30, "consume_thread_max": 20}, "must not exceed"),
    ({"pull_batch_size": 1025}, "pull_batch_size"),
    ({"pull_threshold_for_topic": 0}, "pull_threshold_for_topic"),
    ({"pull_threshold_size_for_queue": "100"}, "pull_threshold_size_for_queue"),
    ({"max_reconsume_times": -2}, "max_reconsume_times"),
    ({"consume_timeout": 0}, "consume_timeout"),
    ({"pull_interval": -1}, "pull_interval"),
    ({"lock_interval": float("nan")}, "lock_interval"),
    ({"post_subscription_when_pull": 1}, "post_subscription_when_pull"),
    ({"no_such_setting": 1}, "unknown push consumer settings"),
    ({"rebalance_interval": 0}, "rebalance_interval"),
    ({"consume_timestamp": "2024-01-01"}, "yyyyMMddHHmmss"),
    ({"consume_timestamp": "20241301000000"}, "not a valid time"),
    ({"message_model": "CLUSTERING"}, "message_model"),
    ({"consume_from": 1}, "consume_from"),
    ({"allocate_strategy": object()}, "allocate_strategy"),
])
def test_bad_settings_are_refused_clearly(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(MQClientError, match=message):
        PushConsumer("cg", namesrv=NAMESRV, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("group", ["", "bad group", "DEFAULT_CONSUMER", "x" * 256])
def test_bad_groups_are_refused(group: str) -> None:
    with pytest.raises(MQClientError):
        PushConsumer(group, namesrv=NAMESRV)


def test_subscriptions_and_listeners() -> None:
    consumer = PushConsumer("cg", namesrv=NAMESRV)
    consumer.subscribe("T", "a || b")
    consumer.subscribe("U")
    assert consumer.subscriptions() == {"T": "a || b", "U": "*"}
    sub = consumer.rebalance.subscription_inner["T"]
    assert sub.tags_set == {"a", "b"} and len(sub.code_set) == 2
    consumer.unsubscribe("U")
    assert consumer.subscriptions() == {"T": "a || b"}
    for topic, expression in (("bad topic", "*"), ("T", "||"), ("T", 5)):
        with pytest.raises(MQClientError):
            consumer.subscribe(topic, expression)  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match="callable"):
        consumer.register_concurrent_listener("not a function")  # type: ignore[arg-type]
    with pytest.raises(MQClientError, match="not started"):
        _ = consumer.instance
    with pytest.raises(MQClientError, match="no name server"):
        no_namesrv = PushConsumer("cg", namesrv="")
        no_namesrv.register_concurrent_listener(lambda msgs, context: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
        no_namesrv.start()
    consumer.shutdown()     # never started: nothing to do
    with pytest.raises(MQClientError, match="SHUTDOWN_ALREADY"):
        consumer.start()


def test_parse_consume_timestamp() -> None:
    assert parse_consume_timestamp("20240102030405") == int(datetime(2024, 1, 2, 3, 4, 5).timestamp() * 1000)
    for bad in ("2024010203040", "2024010203040x", "20240230000000"):
        with pytest.raises(MQClientError):
            parse_consume_timestamp(bad)


def test_consume_message_directly_result_body() -> None:
    result = ConsumeMessageDirectlyResult(order=True, auto_commit=False, consume_result=CMResult.CR_LATER,
                                          remark="r", spent_time_mills=7)
    encoded = result.encode()
    assert encoded == (b'{"autoCommit":false,"consumeResult":"CR_LATER","order":true,"remark":"r",'
                       b'"spentTimeMills":7}')
    assert ConsumeMessageDirectlyResult.decode(encoded) == result
    with pytest.raises(BodyDecodeError):
        ConsumeMessageDirectlyResult.decode(b'{"consumeResult":"NOPE"}')
    with pytest.raises(BodyDecodeError):
        ConsumeMessageDirectlyResult.decode(b"[1]")


def test_is_async_callable() -> None:
    async def coroutine_function() -> None:
        pass

    class AsyncCallable:
        async def __call__(self) -> None:
            pass

    assert is_async_callable(coroutine_function) and is_async_callable(AsyncCallable())
    assert not is_async_callable(lambda: None) and not is_async_callable(print)


def test_consume_bundle_time_is_checked() -> None:
    assert PushConsumerSettings().consume_bundle_time == 0.001
    assert PushConsumerSettings(consume_bundle_time=0).consume_bundle_time == 0
    for bad in (-0.1, 2.0, "1"):
        with pytest.raises(MQClientError, match="consume_bundle_time"):
            PushConsumerSettings(consume_bundle_time=bad)  # type: ignore[arg-type]


def test_flow_control_resume_ratio_is_checked() -> None:
    assert PushConsumerSettings().flow_control_resume_ratio == 0.5
    assert PushConsumerSettings(flow_control_resume_ratio=0).flow_control_resume_ratio == 0
    assert PushConsumerSettings(flow_control_resume_ratio=1).flow_control_resume_ratio == 1
    for bad in (-0.1, 1.5, "0.5", True):
        with pytest.raises(MQClientError, match="flow_control_resume_ratio"):
            PushConsumerSettings(flow_control_resume_ratio=bad)  # type: ignore[arg-type]
