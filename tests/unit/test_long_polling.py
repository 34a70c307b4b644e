"""`PullRequestHoldService`: held pulls woken by messages are answered together after the loop's
current turn, and each connection's answers are written at once (not at the end of the next turn)."""

from __future__ import annotations

import asyncio

from rocketflow.broker.long_polling import PullRequestHoldService
from rocketflow.net import RequestContext
from rocketflow.remoting.codes import RequestCode, ResponseCode
from rocketflow.remoting.command import RemotingCommand


class RecordingChannel:
    """Stands in for a connection: records what is queued on it and when it is written."""

    def __init__(self, name: str, events: list[tuple[str, str]]) -> None:
        self.name = name
        self.events = events
        self.closed = False
        self.remote_address = name

    def send(self, command: RemotingCommand) -> bool:
        self.events.append(("queue", self.name))
        return True

    def flush(self) -> None:
        self.events.append(("write", self.name))


def _found(ctx: RequestContext, request: RemotingCommand, parsed: object) -> RemotingCommand:
    assert parsed == ("parsed", request.ext_fields["queueId"])  # what the pull was suspended with
    return request.make_response(ResponseCode.SUCCESS)


def _hold(service: PullRequestHoldService, channel: RecordingChannel, queue_id: int, timeout_ms: int = 15_000) -> None:
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"queueId": str(queue_id)})
    ctx = RequestContext(channel, request)  # type: ignore[arg-type]
    service.suspend(ctx, request, "T", queue_id, 5, None, timeout_ms, ("parsed", str(queue_id)))


def test_woken_pulls_are_answered_together_and_each_connection_written_once() -> None:
    async def scenario() -> None:
        events: list[tuple[str, str]] = []
        service = PullRequestHoldService(_found)
        service.start()
        first, second = RecordingChannel("first", events), RecordingChannel("second", events)
        _hold(service, first, 0)
        _hold(service, first, 1)
        _hold(service, second, 2)
        closed = RecordingChannel("closed", events)
        _hold(service, closed, 3)
        closed.closed = True
        for queue_id in range(4):
            service.notify_messages_arriving("T", queue_id, 5, [0])
        assert events == []  # not inside the put that woke them
        await asyncio.sleep(0)
        assert events == [("queue", "first"), ("queue", "first"), ("queue", "second"),
                          ("write", "first"), ("write", "second")]
        assert service.held_count == 0 and service.woken_by_message == 4 and service.suspended == 4
        await service.stop()

    asyncio.run(scenario())


def test_a_pull_whose_time_is_up_is_written_at_once() -> None:
    async def scenario() -> None:
        events: list[tuple[str, str]] = []
        service = PullRequestHoldService(_found)
        service.start()
        _hold(service, RecordingChannel("late", events), 0, timeout_ms=10)
        await asyncio.sleep(0.1)
        assert events == [("queue", "late"), ("write", "late")] and service.woken_by_timeout == 1
        await service.stop()

    asyncio.run(scenario())


def test_each_held_pull_is_answered_at_its_own_timeout() -> None:
    """One timer serves every held pull: each is answered at its own suspend timeout, whatever the order they
    were held in; a pull a message woke earlier, or whose connection went away, is not answered again."""
    async def scenario() -> None:
        events: list[tuple[str, str]] = []
        service = PullRequestHoldService(_found)
        service.start()
        loop = asyncio.get_running_loop()
        started = loop.time()
        answered_at: dict[str, float] = {}

        class TimedChannel(RecordingChannel):
            def send(self, command: RemotingCommand) -> bool:
                answered_at[self.name] = loop.time() - started
                return super().send(command)

        channels = {name: TimedChannel(name, events) for name in ("300ms", "100ms", "200ms", "woken", "gone")}
        _hold(service, channels["300ms"], 0, timeout_ms=300)   # the longest first: the timer moves earlier
        _hold(service, channels["100ms"], 1, timeout_ms=100)
        _hold(service, channels["200ms"], 2, timeout_ms=200)
        _hold(service, channels["woken"], 3, timeout_ms=50)
        _hold(service, channels["gone"], 4, timeout_ms=50)
        service.notify_messages_arriving("T", 3, 5, [0])
        assert service.release_channel(channels["gone"]) == 1
        await asyncio.sleep(0.45)
        for name, timeout in (("100ms", 0.1), ("200ms", 0.2), ("300ms", 0.3)):
            assert timeout - 0.005 <= answered_at[name] < timeout + 0.1, (name, answered_at)
        assert answered_at["woken"] < 0.05 and "gone" not in answered_at
        assert [name for kind, name in events if kind == "write"].count("woken") == 1
        assert service.woken_by_timeout == 3 and service.woken_by_message == 1 and service.held_count == 0
        assert service.suspended == 5
        await service.stop()

    asyncio.run(scenario())


def test_pulls_answered_early_do_not_pile_up() -> None:
    """Deadlines of pulls woken before their timeout are dropped as more pulls are held, not kept for 15 s."""
    async def scenario() -> None:
        service = PullRequestHoldService(_found)
        service.start()
        channel = RecordingChannel("busy", [])
        for _ in range(5_000):
            _hold(service, channel, 0)
            service.notify_messages_arriving("T", 0, 5, [0])
            service._wake_woken()
        assert service.held_count == 0 and service.woken_by_message == 5_000
        assert len(service._deadlines) <= 2 * 1 + 64 + 1
        await service.stop()

    asyncio.run(scenario())
