"""`ConsumeLock`: one lock for thread holders and asyncio-task holders alike."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rocketflow.client.consumer.consume.orderly import MessageQueueLock
from rocketflow.client.consumer.consume_lock import ConsumeLock
from rocketflow.client.consumer.process_queue import ProcessQueue
from rocketflow.protocol.message import MessageQueue


def test_threads_are_excluded_and_the_owner_reenters() -> None:
    lock = ConsumeLock()
    with lock, lock:
        assert lock.locked()
        results: list[bool] = []
        other = threading.Thread(target=lambda: results.append(lock.acquire(timeout=0.05)))
        other.start()
        other.join()
        assert results == [False]
    assert not lock.locked()


@pytest.mark.parametrize("holder", ["thread", "token"])
def test_a_waiting_thread_gets_the_lock_when_released(holder: str) -> None:
    """Held by this thread (released with `release`) or by an owner token (`release_for`)."""
    lock = ConsumeLock()
    token = object()
    if holder == "thread":
        lock.acquire()
    else:
        assert lock.try_acquire_for(token)
    got = threading.Event()

    def wait() -> None:
        assert lock.acquire(timeout=5)
        got.set()
        lock.release()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.05)
    assert not got.is_set()
    if holder == "thread":
        lock.release()
    else:
        lock.release_for(token)
    waiter.join(5)
    assert got.is_set()


def test_release_by_a_non_owner_raises() -> None:
    lock = ConsumeLock()
    with pytest.raises(RuntimeError, match="unlocked"):
        lock.release()
    lock.acquire()
    errors: list[BaseException] = []

    def release() -> None:
        try:
            lock.release()
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=release)
    thread.start()
    thread.join()
    assert len(errors) == 1 and "does not own" in str(errors[0])
    lock.release()


def test_tasks_of_one_loop_exclude_each_other() -> None:
    """Unlike an RLock, a task holding the lock across an await keeps other tasks of the same thread out."""
    lock = ConsumeLock()
    inside: list[str] = []
    overlaps: list[str] = []

    async def holder(name: str) -> None:
        async with lock:
            if inside:
                overlaps.append(name)
            inside.append(name)
            await asyncio.sleep(0.02)
            inside.remove(name)

    async def main() -> None:
        await asyncio.gather(*(holder(f"t{index}") for index in range(5)))

    asyncio.run(main())
    assert not overlaps


def test_a_task_times_out_while_a_thread_holds_the_lock_and_reenters_its_own() -> None:
    lock = ConsumeLock()
    lock.acquire()

    async def main() -> tuple[bool, float]:
        started = time.monotonic()
        got = await lock.acquire_async(timeout=0.1)
        return got, time.monotonic() - started

    got, waited = asyncio.run(main())
    assert not got and waited >= 0.09
    lock.release()

    async def reenter() -> bool:
        assert await lock.acquire_async(timeout=0)
        assert lock.try_acquire_for_task()      # the same task re-enters
        lock.release()
        lock.release()
        return lock.locked()

    assert asyncio.run(reenter()) is False


def test_a_thread_waits_for_a_task_holder() -> None:
    lock = ConsumeLock()
    acquired = threading.Event()
    release = threading.Event()

    async def hold() -> None:
        assert await lock.acquire_async()
        acquired.set()
        while not release.is_set():
            await asyncio.sleep(0.005)
        lock.release()

    runner = threading.Thread(target=lambda: asyncio.run(hold()))
    runner.start()
    assert acquired.wait(5)
    assert not lock.acquire(timeout=0.05)
    release.set()
    assert lock.acquire(timeout=5)
    lock.release()
    runner.join(5)


def test_try_acquire_for_task_needs_a_task() -> None:
    with pytest.raises(RuntimeError):
        ConsumeLock().try_acquire_for_task()


def test_process_queue_and_message_queue_lock_use_it() -> None:
    assert isinstance(ProcessQueue().consume_lock, ConsumeLock)
    locks = MessageQueueLock()
    mq = MessageQueue("T", "b", 0)
    assert locks.fetch_lock_object(mq) is locks.fetch_lock_object(mq)
    assert locks.fetch_lock_object(mq) is not locks.fetch_lock_object(MessageQueue("T", "b", 1))


def test_an_owner_token_holds_the_lock_across_threads_and_tasks() -> None:
    lock = ConsumeLock()
    token = object()
    assert lock.try_acquire_for(token)
    assert lock.try_acquire_for(token)          # re-entrant for the same token
    assert not lock.acquire(timeout=0.02)       # a thread waits ...
    assert not lock.try_acquire_for(object())   # ... and another token is refused

    async def task_tries() -> bool:
        return lock.try_acquire_for_task()

    assert asyncio.run(task_tries()) is False   # so is a task
    with pytest.raises(RuntimeError):
        lock.release()                          # the calling thread is not the owner
    with pytest.raises(RuntimeError):
        lock.release_for(object())
    released = threading.Thread(target=lambda: (lock.release_for(token), lock.release_for(token)))
    released.start()                            # any thread may release for the token
    released.join()
    assert not lock.locked()
    with pytest.raises(RuntimeError):
        lock.release_for(token)
