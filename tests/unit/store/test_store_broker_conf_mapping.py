"""broker.conf names that land in the store config: mappedFileSizeConsumeQueue, messageDelayLevel."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketflow.broker.config import BrokerConfigError, build_broker_config, config_overrides_from_properties
from rocketflow.store.config import DEFAULT_MESSAGE_DELAY_LEVEL


def test_consume_queue_file_size_is_bytes_mapped_to_units(tmp_path: Path) -> None:
    assert config_overrides_from_properties("mappedFileSizeConsumeQueue=6000000") == {
        "store.consume_queue_segment_units": 300_000}
    # rounded up to whole units, as RocketMQ's getMappedFileSizeConsumeQueue
    assert config_overrides_from_properties("mappedFileSizeConsumeQueue = 30") == {
        "store.consume_queue_segment_units": 2}
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path / 'store'}\nmappedFileSizeConsumeQueue=200\n")
    config = build_broker_config(conf_file=conf)
    assert config.store.consume_queue_segment_units == 10
    assert config.store.consume_queue_segment_size == 200
    for bad in ("0", "-20", "big"):
        with pytest.raises(BrokerConfigError, match="mappedFileSizeConsumeQueue"):
            config_overrides_from_properties(f"mappedFileSizeConsumeQueue={bad}")


def test_message_delay_level_reaches_the_store(tmp_path: Path) -> None:
    default = build_broker_config()
    assert default.message_delay_level == default.store.message_delay_level == DEFAULT_MESSAGE_DELAY_LEVEL
    conf = tmp_path / "broker.conf"
    conf.write_text("messageDelayLevel=1s 2s 3m\n")
    from_file = build_broker_config(conf_file=conf)
    assert from_file.delay_levels_ms == [1000, 2000, 180_000]
    assert from_file.store.delay_levels_ms == (1000, 2000, 180_000)
    overridden = build_broker_config({"message_delay_level": "5s"}, conf_file=conf)
    assert overridden.store.message_delay_level == overridden.message_delay_level == "5s"
    store_only = build_broker_config({"store.message_delay_level": "7s"})
    assert store_only.message_delay_level == store_only.store.message_delay_level == "7s"
    with pytest.raises(BrokerConfigError, match="message_delay_level"):
        build_broker_config({"message_delay_level": "1s 5x"})
