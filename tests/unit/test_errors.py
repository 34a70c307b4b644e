"""Every error hierarchy of rocketflow derives from `RocketflowError`, and keeps the standard base it had."""

from __future__ import annotations

import pytest

from rocketflow.acl.errors import AclConfigError, AclDeniedError
from rocketflow.broker.config import BrokerConfigError
from rocketflow.cli.demo import DemoError
from rocketflow.client.errors import MQError
from rocketflow.errors import RocketflowError
from rocketflow.filter import FilterSyntaxError
from rocketflow.namesrv.config import NamesrvConfigError
from rocketflow.net.errors import RemotingError
from rocketflow.net.tls import TlsConfigError
from rocketflow.protocol.codec import RecordDecodeError, RecordEncodeError
from rocketflow.protocol.ids import InvalidMessageIdError
from rocketflow.protocol.names import InvalidNameError
from rocketflow.protocol.properties import InvalidPropertyError
from rocketflow.protocol.tags import SubscriptionParseError
from rocketflow.remoting.errors import ProtocolError
from rocketflow.spark.connection import SourceError
from rocketflow.store.errors import StoreError
from rocketflow.store.ha.protocol import HAProtocolError
from rocketflow.store.put_request import IllegalMessageError

VALUE_ERRORS = [AclConfigError, BrokerConfigError, DemoError, FilterSyntaxError, NamesrvConfigError, TlsConfigError,
                RecordEncodeError, InvalidMessageIdError, InvalidNameError, InvalidPropertyError,
                SubscriptionParseError, SourceError, IllegalMessageError, HAProtocolError]
OTHER_ROOTS = [AclDeniedError, MQError, RemotingError, ProtocolError, RecordDecodeError, StoreError]


@pytest.mark.parametrize("error", VALUE_ERRORS + OTHER_ROOTS)
def test_every_error_derives_from_the_root(error: type[Exception]) -> None:
    assert issubclass(error, RocketflowError)


@pytest.mark.parametrize("error", VALUE_ERRORS)
def test_value_errors_stay_value_errors(error: type[Exception]) -> None:
    assert issubclass(error, ValueError)


@pytest.mark.parametrize("error", OTHER_ROOTS)
def test_other_roots_do_not_become_value_errors(error: type[Exception]) -> None:
    assert not issubclass(error, ValueError)
