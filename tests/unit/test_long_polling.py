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
        assert service.held_count == 0 and service.woken_by_message == 4
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
