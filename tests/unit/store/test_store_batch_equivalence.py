"""`PutBatchRequest` (the broker's SEND_BATCH_MESSAGE path) stores exactly what per-message puts store."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import small_config
from rocketflow.protocol.properties import encode_properties
from rocketflow.protocol.tags import tags_code
from rocketflow.store import MessageStore, PutMessageRequest
from rocketflow.store.commit_log import PutBatchRequest

messages = st.lists(
    st.tuples(
        st.binary(min_size=1, max_size=600),
        st.sampled_from(["", "TagA", "pay"]),
        st.text("abc xyz", max_size=12),
        st.integers(0, 7),
    ),
    min_size=1,
    max_size=20,
)


def _store(root: Path) -> MessageStore:
    store = MessageStore(small_config(root), clock_ms=lambda: 1_700_000_000_123)
    store.start()
    return store


def _log_bytes(store: MessageStore) -> bytes:
    chunks, offset = [], store.min_phy_offset
    while offset < store.max_phy_offset:
        data = store.get_commit_log_data(offset)
        assert data, f"no commit-log data at {offset}"
        chunks.append(data)
        offset += len(data)
    return b"".join(chunks)


@settings(max_examples=25)
@given(batch=messages)
def test_batch_put_equals_message_puts(batch: list[tuple[bytes, str, str, int]]) -> None:
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        single, batched = _store(Path(one)), _store(Path(two))
        try:
            requests = []
            group = PutBatchRequest(topic="Orders", queue_id=3, born_timestamp=1_700_000_000_000,
                                    born_host=("10.0.0.1", 5000))
            for body, tags, keys, flag in batch:
                properties = {"TAGS": tags, "KEYS": keys} if tags else {"KEYS": keys}
                properties = {k: v for k, v in properties.items() if v}
                encoded = encode_properties(properties).encode()
                requests.append(PutMessageRequest(
                    topic="Orders", queue_id=3, body=body, properties=properties, flag=flag,
                    born_timestamp=1_700_000_000_000, born_host=("10.0.0.1", 5000), tags_code=tags_code(tags),
                    keys=keys or None,
                ))
                group.add(body, encoded, flag, tags_code(tags), keys or None)
            first = single.put_messages(requests)
            second = batched.put_batch(group)
            assert first.status == second.status
            assert (first.queue_offset, first.message_count) == (second.queue_offset, second.message_count)
            assert _log_bytes(single) == _log_bytes(batched)
            assert single.get_max_offset_in_queue("Orders", 3) == batched.get_max_offset_in_queue("Orders", 3)
            for key in {keys for _, _, keys, _ in batch for keys in keys.split() if keys}:
                left = single.query_message("Orders", key, 64, 0, 2**62)
                right = batched.query_message("Orders", key, 64, 0, 2**62)
                assert sorted(left.buffers) == sorted(right.buffers) and left.buffers
        finally:
            single.shutdown()
            batched.shutdown()
