"""docs/configuration.md, written from the config models so that it cannot drift from them.

Every element and attribute config.xml may hold, with its value, its default and what it means
(the docstring under the model field, or the model's own docstring). ``hive config reference``
prints it; ``tests/config/test_reference.py`` fails when the committed file differs.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
import textwrap
from collections.abc import Iterator
from typing import Any

from pydantic_core import PydanticUndefined
from pydantic_xml import BaseXmlModel

from ._loader import _describe
from ._root import HiveConfig
from ._schema import Slot, model_shape

__all__ = ["reference_markdown"]

INTRO = """\
# config.xml reference

Every element and attribute of Hive's `config.xml`, with its value, its default and what it
means. Element names are HiveMQ 4's. Generated from the configuration models by
`hive config reference` (do not edit by hand: `tests/config/test_reference.py` fails when this
file and the models differ). `${ENV:NAME}` may stand for any value; it is replaced from the
environment. `${ENV:NAME:-default}` takes `default` when NAME is not set or empty.

A path reads from `<hivemq>` down: `cluster/transport/tcp/bind-port` is
`<hivemq><cluster><transport><tcp><bind-port>`. `@name` is an attribute; `[]` marks an element
that may repeat. An element left out takes its default; "not set" means the value is absent and
the text says what that implies.
"""

SECTION_NOTES = {
    "listeners": "Without `<listeners>`, one TCP listener on 0.0.0.0:1883; an empty "
                 "`<listeners/>` means no MQTT listener at all. Listeners are opened in the "
                 "order written.",
    "cluster": "Without `<enabled>true</enabled>` a node runs alone; a `<cluster>` that sets "
               "anything else but leaves `<enabled>` out is refused. Transport and discovery "
               "must fit (see docs/cluster-discovery.md): left out, each is chosen to fit the "
               "other, both left out mean UDP with multicast.",
}


@functools.cache
def _field_docs(model: type) -> dict[str, str]:
    """The docstrings written under the fields of ``model`` and of its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, BaseXmlModel)) or \
                klass.__module__.startswith("pydantic"):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, following in zip(body, [*body[1:], None], strict=False):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(following, ast.Expr)
                    and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def _one_line(text: str) -> str:
    """Docstring text as one table cell: reST markup as Markdown, pipes escaped."""
    text = re.sub(r":\w+:`([^`]*)`", r"\1", text).replace("``", "`")
    # an element name outside code would be read as an HTML tag by a Markdown renderer
    parts = re.split(r"(`[^`]*`)", " ".join(text.split()))
    text = "".join(part if part.startswith("`") else re.sub(r"(<[^<>\s]+>)", r"`\1`", part)
                   for part in parts)
    return text.replace("|", "\\|")


def _default(info: Any) -> str:
    if info.default_factory is not None:
        return ""  # a section: its elements have their own defaults
    value = info.default
    if value is PydanticUndefined:
        return "required"
    if value is None or value == "":
        return "not set"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in value) if value else "none"
    return str(value)


def _model_doc(model: type[BaseXmlModel]) -> str:
    doc = model.__doc__ or ""
    if doc == BaseXmlModel.__doc__ or doc.startswith(("A base model", "Usage docs")):
        return ""
    return _one_line(inspect.cleandoc(doc).split("\n\n")[0])


def _rows(model: type[BaseXmlModel], path: str,
          seen: tuple[type, ...] = ()) -> Iterator[tuple[str, str, str, str]]:
    shape = model_shape(model)
    docs = _field_docs(model)
    for name, slot in shape.slots.items():
        info = model.model_fields[name]
        doc = _one_line(docs.get(name, ""))
        if slot.attribute is not None:
            yield (f"{path}/@{slot.attribute}", _describe(info.annotation, info.metadata),
                   _default(info), doc)
            continue
        yield from _slot_rows(model, slot, info, path, doc, seen)


def _slot_rows(model: type[BaseXmlModel], slot: Slot, info: Any, path: str, doc: str,
               seen: tuple[type, ...]) -> Iterator[tuple[str, str, str, str]]:
    prefix = "/".join([path, *slot.wrappers]) if path else "/".join(slot.wrappers)
    for tag, member in slot.tags.items():
        where = f"{prefix}/{tag}" if prefix else tag
        where += "[]" if slot.many else ""
        if member is None:
            yield where, _describe(info.annotation, info.metadata), _default(info), doc
            continue
        text = doc or _model_doc(member)
        default = _default(info)
        yield where, "elements", "absent" if default == "not set" else default, text
        if member not in seen:
            yield from _rows(member, where, (*seen, member))


def reference_markdown() -> str:
    """The whole of docs/configuration.md."""
    out = [INTRO]
    for name, slot in model_shape(HiveConfig).slots.items():
        tag = slot.outer_tags[0]
        member = next(iter(slot.tags.values()))
        assert member is not None
        out.append(f"\n## `<{tag}>`\n\n")
        intro = _one_line(_field_docs(HiveConfig).get(name, ""))
        out.append(f"{intro} {SECTION_NOTES.get(tag, '')}".strip() + "\n")
        out.append("\n| element | value | default | meaning |\n| --- | --- | --- | --- |\n")
        for where, value, default, meaning in _rows(member, tag):
            out.append(f"| `{where}` | {value} | {default} | {meaning} |\n")
    return "".join(out)
