"""Encoded batches (`EncodedBatchRequest`: the broker's SEND_BATCH_MESSAGE path) store exactly what per-message
puts store, and a malformed one stores nothing."""

from __future__ import annotations

import dataclasses
import struct
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import small_config
from rocketflow.protocol.codec import encode_batch_body
from rocketflow.protocol.message import Message
from rocketflow.protocol.properties import encode_properties
from rocketflow.protocol.tags import tags_code
from rocketflow.store import MessageStore, PutMessageRequest, batch_append
from rocketflow.store.batch_append import _same_place_values
from rocketflow.store.message_append import append_one
from rocketflow.store.put_request import EncodedBatchRequest, PutMessageStatus


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


def _found_by_key(store: MessageStore, topic: str, key: str) -> list[bytes]:
    """The records the index finds for ``key``, in a stable order."""
    return sorted(store.query_message(topic, key, 64, 0, 2**62).buffers)


def _assert_stored_alike(single: MessageStore, requests: list[PutMessageRequest], batched: MessageStore,
                         encoded: EncodedBatchRequest, keys: set[str]) -> None:
    """Put the messages one by one in `single` and as one encoded batch in `batched`: the same records, queue
    units and index entries result."""
    first = single.put_messages(requests)
    second = batched.put_messages(encoded)
    assert first.status == second.status == PutMessageStatus.PUT_OK
    assert (first.queue_offset, first.message_count, first.commit_log_offsets) == \
        (second.queue_offset, second.message_count, second.commit_log_offsets)
    assert _log_bytes(single) == _log_bytes(batched)
    assert single.get_max_offset_in_queue("Orders", 3) == batched.get_max_offset_in_queue("Orders", 3)
    left_queue, right_queue = (store.consume_queues.find("Orders", 3) for store in (single, batched))
    assert left_queue is not None and right_queue is not None
    count = len(requests)
    assert [left_queue.unit_at(i) for i in range(count)] == [right_queue.unit_at(i) for i in range(count)]
    for key in keys:
        assert _found_by_key(single, "Orders", key) == _found_by_key(batched, "Orders", key) != []


encoded_messages = st.lists(
    st.tuples(
        st.binary(min_size=0, max_size=600),
        st.sampled_from(["", "TagA", "pay"]),
        st.text("abc xyz", max_size=12),
        st.one_of(st.none(), st.text("0123456789ABCDEF", min_size=1, max_size=32)),
        st.integers(0, 7),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=40)
@given(batch=encoded_messages, suffix=st.sampled_from([{}, {"CLUSTER": "DefaultCluster"}, {"CLUSTER": "c", "X": "y"}]))
def test_encoded_batch_put_equals_message_puts(batch: list[tuple[bytes, str, str, str | None, int]],
                                               suffix: dict[str, str]) -> None:
    """A batch stored from its wire encoding (SEND_BATCH_MESSAGE's body) stores what per-message puts store:
    the same records (own properties, then the batch-wide ones), queue units, tags codes and index keys."""
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        single, batched = _store(Path(one)), _store(Path(two))
        try:
            requests, messages = [], []
            for body, tags, keys, uniq, flag in batch:
                own = {"TAGS": tags, "KEYS": keys, "UNIQ_KEY": uniq or ""}
                own = {k: v for k, v in own.items() if v}
                messages.append(Message("Orders", body, flag=flag, properties=dict(own)))
                requests.append(PutMessageRequest(
                    topic="Orders", queue_id=3, body=body, properties={**own, **suffix}, flag=flag,
                    born_timestamp=1_700_000_000_000, born_host=("10.0.0.1", 5000),
                ))
            encoded = EncodedBatchRequest("Orders", 3, encode_batch_body(messages),
                                          encode_properties(suffix).encode(), born_timestamp=1_700_000_000_000,
                                          born_host=("10.0.0.1", 5000))
            words = {word for _, _, keys, _, _ in batch for word in keys.split() if word}
            words |= {uniq for _, _, _, uniq, _ in batch if uniq}
            _assert_stored_alike(single, requests, batched, encoded, words)
        finally:
            single.shutdown()
            batched.shutdown()


def _element(body: bytes, props: bytes, *, declared: int | None = None, body_len: int | None = None) -> bytes:
    size = 20 + len(body) + 2 + len(props)
    head = struct.pack(">iiiii", size if declared is None else declared, 0, 0, 0,
                       len(body) if body_len is None else body_len)
    return head + body + struct.pack(">H", len(props)) + props


_GOOD = _element(b"good", b"A\x01b\x02")


@pytest.mark.parametrize(("encoded", "status", "detail"), [
    (b"", PutMessageStatus.MESSAGE_ILLEGAL, "the batch body is empty"),
    (_GOOD + b"\x00" * 10, PutMessageStatus.MESSAGE_ILLEGAL, "batch message 1: truncated (10 bytes left)"),
    (_GOOD + _GOOD + _element(b"abc", b"", body_len=900), PutMessageStatus.MESSAGE_ILLEGAL,
     "batch message 2: body length 900 exceeds the batch"),
    (_element(b"abc", b"", body_len=-5), PutMessageStatus.MESSAGE_ILLEGAL,
     "batch message 0: body length -5 exceeds the batch"),
    (_GOOD + _element(b"abc", b"K\x01v\x02", declared=99), PutMessageStatus.MESSAGE_ILLEGAL,
     "batch message 1: declared size 99 != actual 29"),
    (_GOOD + _element(b"abc", b"")[:-2] + b"\x7f\xff", PutMessageStatus.MESSAGE_ILLEGAL,
     "batch message 1: properties length 32767 exceeds the batch"),
    (_GOOD + _element(b"x" * 5000, b""), PutMessageStatus.MESSAGE_ILLEGAL,
     "batch message 1: body size 5000 exceeds the maximum 4096"),
    (_GOOD + _element(b"x" * 4050, b""), PutMessageStatus.MESSAGE_ILLEGAL,
     "batch message 1: message of 4147 bytes exceeds the maximum 4096"),
    (_GOOD + _element(b"abc", b"K\x01" + b"v" * 300 + b"\x02"), PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
     "batch message 1: properties are 303 bytes, at most 256 allowed"),
])
def test_encoded_batch_rejects_malformed_messages_whole(make_store: Any, encoded: bytes, status: PutMessageStatus,
                                                         detail: str) -> None:
    """A bad message anywhere in the batch fails the whole put, naming the message; nothing is stored."""
    store = make_store(max_message_size=4096, max_properties_size=256)
    assert store.put_messages(EncodedBatchRequest("Orders", 0, _GOOD)).status.is_ok
    before = (store.max_phy_offset, store.get_max_offset_in_queue("Orders", 0))
    result = store.put_messages(EncodedBatchRequest("Orders", 0, encoded))
    assert result.status is status
    assert result.error == detail
    assert (store.max_phy_offset, store.get_max_offset_in_queue("Orders", 0)) == before
    after = store.put_messages(EncodedBatchRequest("Orders", 0, _GOOD + _GOOD))
    assert after.status.is_ok and after.queue_offset == before[1] and after.message_count == 2


def test_encoded_batch_across_segments_and_tags(make_store: Any) -> None:
    """A batch larger than a segment rolls over like per-message puts; TAGS give the units their codes."""
    store = make_store()
    messages = [Message("Orders", bytes([i]) * 700, tags="pay" if i % 2 else "ship", keys=f"k{i} shared")
                for i in range(12)]
    result = store.put_messages(EncodedBatchRequest("Orders", 1, encode_batch_body(messages), b"CLUSTER\x01c\x02"))
    assert result.status.is_ok and result.message_count == 12
    assert len({offset // 4096 for offset in result.commit_log_offsets}) > 1
    queue = store.consume_queues.find("Orders", 1)
    assert queue is not None
    for offset, message in enumerate(messages):
        unit = queue.unit_at(offset)
        assert unit is not None and unit[2] == tags_code(message.tags)
        stored = store.look_message_by_offset(result.commit_log_offsets[offset])
        assert stored is not None and stored.body == message.body
        assert stored.properties["CLUSTER"] == "c" and stored.keys == message.keys
    assert len(store.query_message("Orders", "shared", 64, 0, 2**62).buffers) == 12


def test_encoded_batch_properties_without_a_trailing_separator(make_store: Any) -> None:
    """Properties a client left without the last separator still parse, and the batch's follow a separator."""
    store = make_store()
    result = store.put_messages(EncodedBatchRequest("Orders", 0, _element(b"a", b"TAGS\x01pay\x02KEYS\x01k1"),
                                                    b"CLUSTER\x01c\x02"))
    assert result.status.is_ok
    stored = store.look_message_by_offset(result.commit_log_offsets[0])
    assert stored is not None and stored.properties == {"TAGS": "pay", "KEYS": "k1", "CLUSTER": "c"}
    queue = store.consume_queues.find("Orders", 0)
    assert queue is not None and (unit := queue.unit_at(0)) is not None and unit[2] == tags_code("pay")
    assert len(store.query_message("Orders", "k1", 64, 0, 2**62).buffers) == 1


# One-size batches (every message of one encoded size) take `batch_append._append_one_size_batch`; these check it
# stores what per-message puts store, whether its per-property shortcut applies or not.
_HEX = "0123456789ABCDEF"
one_size_batches = st.tuples(
    st.integers(1, 40),                                   # messages
    st.integers(0, 300),                                  # body length
    st.permutations(["UNIQ_KEY", "TAGS", "KEYS", "X"]),   # the batch's property order ...
    st.booleans(),                                        # ... or a shuffled order per message (same sizes)
    st.sets(st.sampled_from(["UNIQ_KEY", "TAGS", "KEYS", "X"])),  # properties left out of every message
    st.booleans(),                                        # properties end with a separator
    st.sampled_from([b"", b"CLUSTER\x01DefaultCluster"]),
    st.randoms(use_true_random=False),
)


@settings(max_examples=60, deadline=None)
@given(spec=one_size_batches)
def test_one_size_batch_put_equals_message_puts(spec: tuple[Any, ...]) -> None:
    count, body_len, order, shuffled, absent, trailing, suffix, rnd = spec
    names = [name for name in order if name not in absent]
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        single, batched = _store(Path(one)), _store(Path(two))
        try:
            requests, elements = [], []
            for _ in range(count):
                values = {"UNIQ_KEY": "".join(rnd.choice(_HEX) for _ in range(32)), "TAGS": rnd.choice(["pay", "mix"]),
                          "KEYS": rnd.choice(["k1 k2", "k3 k1", "k4 k5"]), "X": rnd.choice(["ab", "cd"])}
                mine = rnd.sample(names, len(names)) if shuffled else names
                own = encode_properties({name: values[name] for name in mine}).encode()
                if trailing and own:
                    own += b"\x02"
                body = bytes(rnd.getrandbits(8) for _ in range(body_len))
                elements.append(_element(body, own))
                stored = own + suffix if not (own and suffix) or own.endswith(b"\x02") else own + b"\x02" + suffix
                requests.append(PutMessageRequest(
                    topic="Orders", queue_id=3, body=body, properties_bytes=stored or b"",
                    born_timestamp=1_700_000_000_000, born_host=("10.0.0.1", 5000),
                    tags_code=tags_code(values["TAGS"]) if "TAGS" in names else 0,
                    keys=values["KEYS"] if "KEYS" in names else None,
                    uniq_key=values["UNIQ_KEY"] if "UNIQ_KEY" in names else None))
            encoded = EncodedBatchRequest("Orders", 3, b"".join(elements), suffix, born_timestamp=1_700_000_000_000,
                                          born_host=("10.0.0.1", 5000))
            words = {key for request in requests for key in [request.uniq_key, *(request.keys or "").split()] if key}
            _assert_stored_alike(single, requests, batched, encoded, words)
        finally:
            single.shutdown()
            batched.shutdown()


def test_one_size_batches_take_the_batch_wide_path_and_others_the_loop(make_store: Any) -> None:
    store = make_store(commit_log_segment_size=64 * 1024)
    log = store.commit_log
    layout = ("Orders", 0)

    def taken(encoded: bytes, topic: str = "Orders") -> bool:
        batch = EncodedBatchRequest(topic, 0, encoded, b"CLUSTER\x01c")
        parts = batch_append._batch_layout(log, batch)
        result = batch_append._append_one_size_batch(log, batch, 1_700_000_000_000, *parts)
        return result is not None

    same = [_element(bytes([i]) * 50, b"UNIQ_KEY\x01" + f"{i:032X}".encode()) for i in range(8)]
    assert taken(b"".join(same))
    assert taken(same[0])
    assert not taken(b"".join(same[:3]) + _element(b"x" * 51, b"UNIQ_KEY\x01" + b"0" * 32))  # sizes differ
    assert not taken(b"".join(same)[:-1])                                        # truncated
    assert not taken(b"".join([same[0], _element(b"y" * 50, b"UNIQ_KEY\x01" + b"1" * 31 + b"\x02")]))  # mixed ends
    assert not taken(_element(b"z" * 2000, b"") * 40)                           # does not fit the segment
    assert not taken(_element(b"z" * 10, b"") * 1025)                           # more than packed at once
    assert layout == ("Orders", 0)


@pytest.mark.parametrize("layout", ["UNIQ_KEY\x01{u}\x02WAIT\x01true", "WAIT\x01true\x02UNIQ_KEY\x01{u}",
                                    "UNIQ_KEY\x01{u}"])
def test_uniq_keys_at_one_place_are_read_batch_wide(layout: str) -> None:
    """A producer's batch (UNIQ_KEY at the same place in every message) is indexed without the per-message
    lookups, under the same keys the per-message puts index."""
    uniqs = [f"{i:032X}" for i in range(40)]
    all_props = [layout.format(u=u).encode() for u in uniqs]
    data = b"".join(_element(b"body", props) for props in all_props)
    element_size = len(data) // len(uniqs)
    found = _same_place_values(data, all_props, b"UNIQ_KEY\x01", 22 + 4, element_size, b"T#")
    assert found == [f"T#{u}".encode() for u in uniqs]
    # the same place in each message but not a property of its own: not read batch-wide
    assert _same_place_values(data, [b"x" + p[1:] for p in all_props], b"NIQ_KEY\x01", 22 + 4, element_size) is None
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        requests = [PutMessageRequest(topic="Orders", queue_id=3, body=b"body", properties_bytes=props,
                                      born_timestamp=1_700_000_000_000, born_host=("10.0.0.1", 5000), uniq_key=u)
                    for u, props in zip(uniqs, all_props, strict=True)]
        encoded = EncodedBatchRequest("Orders", 3, data, born_timestamp=1_700_000_000_000,
                                      born_host=("10.0.0.1", 5000))
        single, batched = _store(Path(one)), _store(Path(two))
        try:
            _assert_stored_alike(single, requests, batched, encoded, set(uniqs))
        finally:
            single.shutdown()
            batched.shutdown()


# Batches that arrive together (`MessageStore.put_encoded_batches`): a run of one-size batches is written at once,
# and the outcome is what putting them one after another gives: results, records, queue units and index.
def _group_element(kind: str, index: int, rnd: Any) -> bytes:
    if kind == "bad":
        return _GOOD + _element(b"abc", b"", body_len=900)
    uniq = "".join(rnd.choice(_HEX) for _ in range(32))
    props = f"UNIQ_KEY\x01{uniq}\x02TAGS\x01{rnd.choice(['pay', 'mix'])}\x02WAIT\x01true".encode()
    if kind == "varied":
        return b"".join(_element(b"v" * (10 + i), props + (b"\x02KEYS\x01kw" if i % 2 else b"")) for i in range(3))
    size = {"small": 40, "large": 700}[kind]
    return b"".join(_element(bytes([index % 251]) * size, props) for _ in range(1 + index % 4))


grouped_batches = st.lists(st.tuples(st.sampled_from(["small", "small", "large", "varied", "bad"]),
                                     st.integers(0, 2), st.sampled_from(["Orders", "%^bad topic"])),
                           min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(spec=grouped_batches, rnd=st.randoms(use_true_random=False))
def test_batches_put_together_equal_batches_put_one_by_one(spec: list[tuple[str, int, str]], rnd: Any) -> None:
    batches = [EncodedBatchRequest(topic if kind != "small" else "Orders", queue_id, _group_element(kind, i, rnd),
                                   b"CLUSTER\x01c", born_timestamp=1_700_000_000_000, born_host=("10.0.0.1", 5000))
               for i, (kind, queue_id, topic) in enumerate(spec)]
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        single, together = _store(Path(one)), _store(Path(two))
        try:
            expected = [single.put_messages(batch) for batch in batches]
            got = together.put_encoded_batches(batches)
            assert all(isinstance(result, type(expected[0])) for result in got)  # ASYNC_FLUSH: nothing to wait for
            assert [(r.status, r.error, r.commit_log_offsets, r.queue_offsets) for r in expected] == \
                [(r.status, r.error, r.commit_log_offsets, r.queue_offsets) for r in got]  # type: ignore[union-attr]
            assert _log_bytes(single) == _log_bytes(together)
            for queue_id in range(3):
                left, right = (store.consume_queues.find("Orders", queue_id) for store in (single, together))
                assert (left is None) == (right is None)
                if left is not None and right is not None:
                    count = single.get_max_offset_in_queue("Orders", queue_id)
                    assert count == together.get_max_offset_in_queue("Orders", queue_id)
                    assert [left.unit_at(i) for i in range(count)] == [right.unit_at(i) for i in range(count)]
            for key in ["kw", *(line.split("UNIQ_KEY\x01")[1][:32] for line in
                                (batch.encoded.decode("latin-1") for batch in batches) if "UNIQ_KEY" in line)]:
                assert _found_by_key(single, "Orders", key) == _found_by_key(together, "Orders", key)
        finally:
            single.shutdown()
            together.shutdown()


def test_a_run_of_one_size_batches_is_one_write(make_store: Any) -> None:
    store = make_store(commit_log_segment_size=64 * 1024)
    rnd = __import__("random").Random(7)
    batches = [EncodedBatchRequest("Orders", i % 2, _group_element("small", i, rnd), b"CLUSTER\x01c")
               for i in range(6)]
    taken, dispatch = store.commit_log.append_encoded_batches(batches, 1_700_000_000_000)
    assert len(taken) == 6 and set(dispatch.runs) == {("Orders", 0), ("Orders", 1)}
    # two queues: each run holds its batches' units in order, with consecutive queue offsets
    assert [dispatch.runs[("Orders", q)][0] for q in (0, 1)] == [0, 0]
    assert [len(dispatch.runs[("Orders", q)][1]) // 3 for q in (0, 1)] == \
        [sum(r.message_count for r in taken[q::2]) for q in (0, 1)]
    assert [r.queue_offset for r in taken] == [0, 0, 1, 2, 4, 6]
    # a batch the one-size path cannot take ends the run; it is stored alone by the next call
    mixed = [batches[0], EncodedBatchRequest("Orders", 0, _group_element("varied", 0, rnd), b""), batches[1]]
    taken, _ = store.commit_log.append_encoded_batches(mixed, 1_700_000_000_000)
    assert len(taken) == 1
    taken, _ = store.commit_log.append_encoded_batches(mixed[1:], 1_700_000_000_000)
    assert len(taken) == 1 and taken[0].message_count == 3


single_puts = st.lists(
    st.tuples(
        st.sampled_from(["Orders", "Pay", "Tö", "%RETRY%cg"]),
        st.integers(0, 3),
        st.binary(min_size=0, max_size=900),
        st.fixed_dictionaries({}, optional={"TAGS": st.sampled_from(["pay", "ship"]),
                                            "KEYS": st.sampled_from(["k1", "k1 k2", " k3 "]),
                                            "UNIQ_KEY": st.text("0123456789ABCDEF", min_size=32, max_size=32),
                                            "X": st.text("abc", max_size=3)}),
        st.sampled_from([0, 4, 8, 12, 2]),  # plain, transaction prepared / commit / rollback, multi tags
        st.sampled_from([("10.0.0.1", 5000), ("::1", 6000)]),
        st.integers(0, 3),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(puts=single_puts)
def test_a_single_message_put_stores_what_the_general_loop_stores(
        puts: list[tuple[str, int, bytes, dict[str, str], int, tuple[str, int], int]]) -> None:
    """`CommitLog.append` takes a short path for one message with encoded properties; giving the same messages
    without them sends each through the general loop. Records, results, queue units and index keys match,
    across segment ends (4 KiB segments), transaction halves, IPv6 hosts and keys."""
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        short, general = _store(Path(one)), _store(Path(two))
        try:
            for topic, queue_id, body, properties, sys_flag, host, reconsume in puts:
                common: dict[str, Any] = {"topic": topic, "queue_id": queue_id, "body": body,
                                          "properties": dict(properties), "sys_flag": sys_flag, "flag": 7,
                                          "born_timestamp": 1_700_000_000_000, "born_host": host,
                                          "reconsume_times": reconsume}
                encoded = encode_properties(properties).encode()
                first = short.put_messages([PutMessageRequest(**common, properties_bytes=encoded)])
                second = general.put_messages([PutMessageRequest(**common)])
                assert first == second
            assert _log_bytes(short) == _log_bytes(general)
            for topic in ("Orders", "Pay", "Tö", "%RETRY%cg"):
                for queue_id in range(4):
                    assert short.get_max_offset_in_queue(topic, queue_id) == \
                        general.get_max_offset_in_queue(topic, queue_id)
                    left, right = (store.consume_queues.find(topic, queue_id) for store in (short, general))
                    assert (left is None) == (right is None)
                    if left is not None and right is not None:
                        count = short.get_max_offset_in_queue(topic, queue_id)
                        assert [left.unit_at(i) for i in range(count)] == [right.unit_at(i) for i in range(count)]
                for key in ("k1", "k2", "k3", *(properties.get("UNIQ_KEY", "") for *_, properties, _, _, _ in puts)):
                    if key:
                        assert _found_by_key(short, topic, key) == _found_by_key(general, topic, key)
        finally:
            short.shutdown()
            general.shutdown()


def test_a_plain_single_message_takes_the_short_path(make_store: Any) -> None:
    store = make_store(commit_log_segment_size=64 * 1024)
    log = store.commit_log
    plain = PutMessageRequest(topic="Orders", queue_id=1, body=b"x" * 100, properties_bytes=b"UNIQ_KEY\x01AB",
                              born_timestamp=1, born_host=("10.0.0.1", 5000))
    assert append_one(log, plain, 1_700_000_000_000) is not None
    assert log.topic_queue_table[("Orders", 1)] == 1
    for odd in (dataclasses.replace(plain, properties_bytes=None), dataclasses.replace(plain, born_host=("::1", 1)),
                dataclasses.replace(plain, topic="SCHEDULE_TOPIC_XXXX"), dataclasses.replace(plain, body=b"y" * 70_000),
                dataclasses.replace(plain, topic="T" * 200)):
        assert append_one(log, odd, 1_700_000_000_000) is None
    assert log.topic_queue_table[("Orders", 1)] == 1  # nothing was stored by the refusals
