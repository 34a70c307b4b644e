"""docs/consumer-settings.md stays in step with the client's settings dataclasses and constructors;
docs/index.md links every document in docs/."""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
from pathlib import Path

import pytest

from rocketflow.client import (
    ClientConfig,
    Producer,
    ProducerSettings,
    PullConsumer,
    PullConsumerSettings,
    PushConsumer,
    PushConsumerSettings,
)
from rocketflow.client.consumer.push_settings import KeyOrderedConfig

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
SETTINGS_DOC = DOCS_DIR / "consumer-settings.md"
SETTINGS_CLASSES: dict[str, type] = {
    cls.__name__: cls
    for cls in (ClientConfig, ProducerSettings, PushConsumerSettings, PullConsumerSettings, KeyOrderedConfig)
}
CONSTRUCTORS_HEADING = "Constructor arguments"
HEADING_CLASS = re.compile(r"\(`(\w+)`\)")
BACKTICKED = re.compile(r"`([^`]*)`")


@dataclasses.dataclass(frozen=True)
class Row:
    name: str
    rocketmq_name: str
    default: str
    meaning: str


def parse_tables(text: str) -> dict[str, dict[str, Row]]:
    """Rows of the settings tables, by section: the class named as ``(`Class`)`` in a heading, or the
    heading text itself. A row's name is the first backticked word of its first cell."""
    sections: dict[str, dict[str, Row]] = {}
    current: dict[str, Row] | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            match = HEADING_CLASS.search(line)
            key = match.group(1) if match else line.lstrip("#").strip()
            current = sections.setdefault(key, {})
            continue
        if current is None or not line.startswith("| `"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        assert len(cells) == 4, f"a settings row needs 4 cells (name, RocketMQ name, default, meaning): {line!r}"
        name = BACKTICKED.match(cells[0])
        assert name is not None, line
        assert name.group(1) not in current, f"{name.group(1)} is documented twice in one table"
        current[name.group(1)] = Row(name.group(1), cells[1], cells[2], cells[3])
    return sections


def documented_default(value: object) -> str:
    """How a default is written in the doc's default column (in backticks)."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    return repr(value)


@pytest.fixture(scope="module")
def tables() -> dict[str, dict[str, Row]]:
    return parse_tables(SETTINGS_DOC.read_text(encoding="utf-8"))


@pytest.mark.parametrize("class_name", sorted(SETTINGS_CLASSES))
def test_every_field_is_documented_with_its_default(tables: dict[str, dict[str, Row]], class_name: str) -> None:
    assert class_name in tables, f"docs/consumer-settings.md has no section headed (`{class_name}`)"
    rows = tables[class_name]
    fields = {field.name: field for field in dataclasses.fields(SETTINGS_CLASSES[class_name])}
    missing = sorted(set(fields) - set(rows))
    stale = sorted(set(rows) - set(fields))
    assert not missing, f"{class_name} fields missing from docs/consumer-settings.md: {missing}"
    assert not stale, f"docs/consumer-settings.md documents {class_name} fields that do not exist: {stale}"
    for name, field in fields.items():
        row = rows[name]
        assert row.rocketmq_name and row.meaning, f"{class_name}.{name}: empty RocketMQ name or meaning cell"
        if field.default is dataclasses.MISSING:
            continue
        written = BACKTICKED.match(row.default)
        expected = documented_default(field.default)
        assert written is not None and written.group(1) == expected, \
            f"{class_name}.{name}: the doc says default {row.default!r}, the code says `{expected}`"


@pytest.mark.parametrize("client_class", [Producer, PushConsumer, PullConsumer], ids=lambda cls: cls.__name__)
def test_every_constructor_argument_is_documented(tables: dict[str, dict[str, Row]], client_class: type) -> None:
    rows = tables.get(CONSTRUCTORS_HEADING)
    assert rows, f"docs/consumer-settings.md has no '{CONSTRUCTORS_HEADING}' table"
    parameters = [parameter for parameter in inspect.signature(client_class).parameters.values()
                  if parameter.kind is not inspect.Parameter.VAR_KEYWORD]
    assert parameters
    for parameter in parameters:
        assert parameter.name in rows, f"{client_class.__name__}({parameter.name}=...) is not documented"
        cell = rows[parameter.name].default
        if parameter.default is inspect.Parameter.empty:
            assert cell.startswith("required"), f"{parameter.name}: required, but the doc says {cell!r}"
        else:
            written = BACKTICKED.match(cell)
            expected = documented_default(parameter.default)
            assert written is not None and written.group(1) == expected, \
                f"{client_class.__name__}({parameter.name}): the doc says default {cell!r}, the code says `{expected}`"


def test_the_parser_sees_a_changed_default() -> None:
    text = SETTINGS_DOC.read_text(encoding="utf-8").replace("| `pull_batch_size` | `pullBatchSize` | `32` |",
                                                            "| `pull_batch_size` | `pullBatchSize` | `33` |")
    assert parse_tables(text)["PushConsumerSettings"]["pull_batch_size"].default == "`33`"
    assert parse_tables(SETTINGS_DOC.read_text(encoding="utf-8"))["PushConsumerSettings"]["pull_batch_size"] \
        .default == "`32`"


def test_the_docs_index_links_every_document() -> None:
    index = (DOCS_DIR / "index.md").read_text(encoding="utf-8")
    links = set(re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", index))
    for document in sorted(DOCS_DIR.glob("*.md")):
        if document.name != "index.md":
            assert document.name in links, f"docs/index.md does not link {document.name}"
    for link in links:
        if not link.startswith(("http://", "https://")):
            assert (DOCS_DIR / link).exists(), f"docs/index.md links {link}, which does not exist"
