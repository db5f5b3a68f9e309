"""config.xml text -> HiveConfig, or a ConfigError naming file, element path and line.

The steps: parse with lxml (line numbers kept, no DTDs, entities or network), drop XML
namespaces from tags, substitute ``${ENV:NAME}``, walk the tree against the models' shape
(refusing what no model declares), then let pydantic-xml build the models. A pydantic error
is mapped back to its element by following its ``loc`` through the same shape.
"""

from __future__ import annotations

import os
import re
import types
import typing
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import pydantic
from lxml import etree
from lxml.etree import _Element as Element
from pydantic.fields import FieldInfo
from pydantic_xml import BaseXmlModel

from ._base import MISPLACED_PREFIX
from ._errors import ConfigError
from ._root import HiveConfig
from ._schema import Slot, model_shape

__all__ = ["load_config", "parse_config"]

_ENV_PLACEHOLDER = re.compile(r"\$\{ENV:([^}]*)\}")
"""``${ENV:NAME}``, or ``${ENV:NAME:-default}``: as in a POSIX shell, the default stands when
NAME is not set or is empty (a container image's config.xml can then offer defaults)."""
_FILE_PLACEHOLDER = re.compile(r"\$\{FILE:([^}]*)\}")
"""``${FILE:/run/secrets/name}``: the file's content, without a final line break (a Docker
secret: unlike an environment variable it shows neither in ``docker inspect`` nor in the
process's environment)."""
MAX_SECRET_FILE = 64 * 1024
_LINE_PREFIX = re.compile(r"^\[line -?\d+\]: ")
_MISPLACED = re.compile(re.escape(MISPLACED_PREFIX) + r"(.*?)\] (.*)", re.DOTALL)
_INDEXED_TAG = re.compile(r"^(.*)\[(\d+)\]$")


def load_config(path: str | os.PathLike[str]) -> HiveConfig:
    """Read and validate the config.xml at ``path``."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the file: {error.strerror}", source=str(path)) from error
    return parse_config(data, source=str(path))


def parse_config(text: str | bytes, source: str = "<string>") -> HiveConfig:
    """Validate config.xml content; ``source`` names it in error messages."""
    root = _parse_xml(text, source)
    if root.tag != "hivemq":
        raise ConfigError(
            f"the root element is <{root.tag}>, expected <hivemq>",
            source=source,
            line=root.sourceline,
            path=root.tag,
        )
    from_environment = _substitute_environment(root, source)
    try:
        _check_element(HiveConfig, root, source)
        try:
            return HiveConfig.from_xml_tree(root)
        except pydantic.ValidationError as error:
            raise _config_error(error, root, source) from None
    except ConfigError as error:
        # A value from ${ENV:...} may be a secret: the message names the variable instead.
        raise _redacted(error, from_environment) from None


# --- reading ------------------------------------------------------------------------------


def _parse_xml(text: str | bytes, source: str) -> Element:
    data = text.encode("utf-8") if isinstance(text, str) else text
    parser = etree.XMLParser(
        remove_comments=True,
        remove_pis=True,
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
    )
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as error:
        raise ConfigError(f"malformed XML: {error.msg}", source=source, line=error.lineno) from None
    doctype = root.getroottree().docinfo
    if doctype.doctype or doctype.internalDTD is not None:
        # Entities could pull in files or blow up in size; config.xml never needs them.
        raise ConfigError(
            "a DOCTYPE is not allowed in config.xml",
            source=source,
            line=_doctype_line(data),
        )
    for element in root.iter():
        # Namespaces (a default xmlns on <hivemq>, say) carry no meaning in config.xml.
        element.tag = etree.QName(element).localname
    return root


def _doctype_line(data: bytes) -> int | None:
    position = data.find(b"<!DOCTYPE")
    return data.count(b"\n", 0, position) + 1 if position >= 0 else None


def _substitute_environment(root: Element, source: str) -> dict[str, str]:
    """Replace ``${ENV:NAME}``, ``${ENV:NAME:-default}`` and ``${FILE:path}`` in text and
    attribute values; the values taken from the environment and files, by placeholder
    (defaults are not secrets).

    Done on the parsed tree rather than the raw text, so line numbers stay true and a value
    holding ``<`` or ``&`` (a password, say) is taken literally.
    """
    used: dict[str, str] = {}

    def substitute(value: str, element: Element, where: str) -> str:
        def lookup(match: re.Match[str]) -> str:
            name, dash, default_text = match.group(1).partition(":-")
            default = default_text if dash else None
            if ":" in name or not name:
                raise ConfigError(
                    f"{match.group(0)} is not a placeholder: write ${{ENV:NAME}} or "
                    "${ENV:NAME:-default}",
                    source=source,
                    line=element.sourceline,
                    path=_path(element) + where,
                )
            value = os.environ.get(name)
            if value is not None and (value or default is None):
                if value:
                    used[match.group(0)] = value
                return value
            if default is not None:
                return default
            raise ConfigError(
                f"environment variable {name} is not set (used as ${{ENV:{name}}})",
                source=source,
                line=element.sourceline,
                path=_path(element) + where,
            )

        def read(match: re.Match[str]) -> str:
            name = match.group(1).strip()
            try:
                with open(name, "rb") as file:
                    data = file.read(MAX_SECRET_FILE + 1)
                if len(data) > MAX_SECRET_FILE:
                    raise ValueError(f"longer than {MAX_SECRET_FILE} bytes")
                content = data.decode("utf-8").removesuffix("\n").removesuffix("\r")
            except (OSError, ValueError) as error:
                why = error.strerror if isinstance(error, OSError) else str(error)
                raise ConfigError(
                    f"cannot read the file {name} (used as ${{FILE:{name}}}): {why}",
                    source=source,
                    line=element.sourceline,
                    path=_path(element) + where,
                ) from None
            if content:
                used[match.group(0)] = content
            return content

        return _FILE_PLACEHOLDER.sub(read, _ENV_PLACEHOLDER.sub(lookup, value))

    for element in root.iter():
        if element.text and "${" in element.text:
            element.text = substitute(element.text, element, "")
        for name, value in element.attrib.items():
            if "${" in value:
                element.set(name, substitute(value, element, f"/@{name}"))
    return used


def _redacted(error: ConfigError, from_environment: dict[str, str]) -> ConfigError:
    """``error`` with every value that came from the environment replaced by its placeholder."""
    problem = error.problem
    # longest first: a value that contains another is replaced whole
    for placeholder, value in sorted(from_environment.items(), key=lambda item: -len(item[1])):
        if value:
            problem = problem.replace(repr(value), placeholder).replace(value, placeholder)
    if problem == error.problem:
        return error
    return ConfigError(problem, source=error.source, line=error.line, path=error.path)


# --- refusing what no model declares -------------------------------------------------------


def _check_element(model: type[BaseXmlModel], element: Element, source: str) -> None:
    shape = model_shape(model)
    _check_attributes(element, shape.attributes, source)
    _check_no_text(element, source)
    seen: Counter[str] = Counter()
    for child in element:
        slot = shape.by_outer_tag.get(child.tag)
        if slot is None:
            raise _unknown_element(child, sorted(shape.by_outer_tag), source)
        seen[child.tag] += 1
        if seen[child.tag] > 1 and (slot.wrappers or not slot.many):
            raise _duplicate_element(child, source)
        if slot.wrappers:
            _check_wrapper(slot, child, 1, source)
        else:
            _check_value(slot.tags[child.tag], child, source)


def _check_wrapper(slot: Slot, element: Element, depth: int, source: str) -> None:
    _check_attributes(element, {}, source)
    _check_no_text(element, source)
    inner = depth < len(slot.wrappers)
    expected = [slot.wrappers[depth]] if inner else list(slot.tags)
    seen: Counter[str] = Counter()
    for child in element:
        if child.tag not in expected:
            raise _unknown_element(child, expected, source)
        seen[child.tag] += 1
        if seen[child.tag] > 1 and (inner or not slot.many):
            raise _duplicate_element(child, source)
        if inner:
            _check_wrapper(slot, child, depth + 1, source)
        else:
            _check_value(slot.tags[child.tag], child, source)


def _check_value(model: type[BaseXmlModel] | None, element: Element, source: str) -> None:
    if model is not None:
        _check_element(model, element, source)
        return
    _check_attributes(element, {}, source)
    for child in element:
        raise ConfigError(
            f"unknown element <{child.tag}>: <{element.tag}> holds a value, not elements",
            source=source,
            line=child.sourceline,
            path=_path(child),
        )
    if element.text is not None:
        element.text = element.text.strip()


def _check_attributes(element: Element, allowed: Iterable[str], source: str) -> None:
    allowed = list(allowed)
    for name in element.attrib:
        if name.startswith("{"):
            continue  # namespaced, like xsi:noNamespaceSchemaLocation: for schema tools
        if name not in allowed:
            expected = (
                f"expected one of: {', '.join(allowed)}" if allowed else "it takes no attributes"
            )
            raise ConfigError(
                f"unknown attribute {name!r} on <{element.tag}>; {expected}",
                source=source,
                line=element.sourceline,
                path=f"{_path(element)}/@{name}",
            )


def _check_no_text(element: Element, source: str) -> None:
    children = list(element)
    # Each piece of text with the line it starts on: the text after the start tag, then the
    # text after each child (which ends where the next child, if any, begins).
    pieces = [(element.text, element.sourceline or 0, True)]
    for child, following in zip(children, [*children[1:], None], strict=False):
        if following is not None:
            pieces.append((child.tail, following.sourceline or 0, False))
        else:
            pieces.append((child.tail, child.sourceline or 0, True))
    for text, anchor, counts_forward in pieces:
        # "..." is how HiveMQ's documentation elides the rest of a file; its examples keep it.
        if not text or not set(text.split()) - {"..."}:
            continue
        if counts_forward:
            line = anchor + text[: len(text) - len(text.lstrip())].count("\n")
        else:
            line = anchor - text[len(text.rstrip()) :].count("\n")
        raise ConfigError(
            f"unexpected text {text.strip()!r}: <{element.tag}> holds elements, not a value",
            source=source,
            line=line,
            path=_path(element),
        )


def _unknown_element(element: Element, expected: Sequence[str], source: str) -> ConfigError:
    parent = element.getparent()
    parent_tag = parent.tag if parent is not None else ""
    return ConfigError(
        f"unknown element <{element.tag}> in <{parent_tag}>; expected one of: "
        + ", ".join(expected),
        source=source,
        line=element.sourceline,
        path=_path(element),
    )


def _duplicate_element(element: Element, source: str) -> ConfigError:
    parent = element.getparent()
    parent_tag = parent.tag if parent is not None else ""
    return ConfigError(
        f"duplicate element <{element.tag}>: <{parent_tag}> takes one",
        source=source,
        line=element.sourceline,
        path=_path(element),
    )


def _path(element: Element) -> str:
    """``hivemq/cluster/discovery/static/node[2]/port``: [n] only where a tag repeats."""
    parts: list[str] = []
    current: Element | None = element
    while current is not None:
        parent = current.getparent()
        part = str(current.tag)
        if parent is not None:
            same = [sibling for sibling in parent if sibling.tag == current.tag]
            if len(same) > 1:
                part += f"[{same.index(current) + 1}]"
        parts.append(part)
        current = parent
    return "/".join(reversed(parts))


# --- mapping pydantic errors back to elements ----------------------------------------------


class _Spot:
    """Where a pydantic error points: an element, maybe a field of its model."""

    def __init__(
        self,
        element: Element,
        suffix: str = "",
        model: type[BaseXmlModel] | None = None,
        field: str | None = None,
        missing: bool = False,
    ) -> None:
        self.element = element
        self.suffix = suffix  # "/@port" or "/host" when the thing itself is not an element
        self.model = model
        self.field = field
        self.missing = missing


def _locate(model: type[BaseXmlModel], element: Element, loc: Sequence[int | str]) -> _Spot:
    if not loc:
        return _Spot(element)
    name, rest = loc[0], loc[1:]
    shape = model_shape(model)
    slot = shape.slots.get(str(name))
    if slot is None:
        return _Spot(element)
    if slot.attribute is not None:
        return _Spot(element, f"/@{slot.attribute}", model, slot.field_name)
    current = element
    for depth, wrapper in enumerate(slot.wrappers):
        found = _children(current, (wrapper,))
        if not found:
            missing = "/".join((*slot.wrappers[depth:], next(iter(slot.tags))))
            return _Spot(current, f"/{missing}", model, slot.field_name, missing=True)
        current = found[0]
    candidates = _children(current, tuple(slot.tags))
    if slot.many:
        if not rest or not isinstance(rest[0], int):
            return _Spot(current, "", model, slot.field_name)
        index, rest = rest[0], rest[1:]
        if index >= len(candidates):
            return _Spot(current, "", model, slot.field_name)
        target = candidates[index]
        member = slot.tags[target.tag]
        if rest and member is not None and rest[0] not in model_shape(member).slots:
            rest = rest[1:]  # the union member's name pydantic puts into the loc
    else:
        if not candidates:
            tag = next(iter(slot.tags))
            return _Spot(current, f"/{tag}", model, slot.field_name, missing=True)
        target = candidates[0]
        member = slot.tags[target.tag]
    if member is None:
        return _Spot(target, "", model, slot.field_name)
    return _locate(member, target, rest)


def _children(element: Element, tags: tuple[str, ...]) -> list[Element]:
    return [child for child in element if child.tag in tags]


def _descend(element: Element, relative: str) -> Element:
    """Follow ``a/b[2]/c`` from ``element`` as far as the elements exist."""
    for step in relative.split("/"):
        match = _INDEXED_TAG.match(step)
        tag, index = (match.group(1), int(match.group(2))) if match else (step, 1)
        found = _children(element, (tag,))
        if len(found) < index:
            break
        element = found[index - 1]
    return element


def _config_error(error: pydantic.ValidationError, root: Element, source: str) -> ConfigError:
    problems = [_problem(detail, root, source) for detail in error.errors()]
    problems.sort(key=lambda problem: problem.line or 0)
    return problems[0]


def _problem(detail: Any, root: Element, source: str) -> ConfigError:
    spot = _locate(HiveConfig, root, detail["loc"])
    message = _LINE_PREFIX.sub("", detail["msg"])
    if detail["type"] == "value_error" or message.startswith("Value error, "):
        message = message.removeprefix("Value error, ")
        misplaced = _MISPLACED.match(message)
        if misplaced:
            return ConfigError(
                misplaced.group(2),
                source=source,
                line=_descend(spot.element, misplaced.group(1)).sourceline,
                path=_path(_descend(spot.element, misplaced.group(1))),
            )
        problem = message
        if message.startswith("expected ") and isinstance(detail["input"], str):
            problem += f", got {detail['input']!r}"
    elif spot.missing or detail["type"] == "missing":
        problem = f"missing required element <{spot.suffix.rsplit('/', 1)[-1]}>"
        spot.suffix = ""  # the path names the element that lacks it
    elif spot.model is not None and spot.field is not None:
        info = spot.model.model_fields[spot.field]
        problem = f"expected {_describe(info.annotation, info.metadata)}, got {detail['input']!r}"
    else:
        problem = message
    return ConfigError(
        problem, source=source, line=spot.element.sourceline, path=_path(spot.element) + spot.suffix
    )


def _describe(annotation: Any, metadata: Sequence[Any] = ()) -> str:
    """What a value of this type looks like, in words: 'an integer between 1 and 65535'."""
    constraints = list(metadata)
    while typing.get_origin(annotation) is Annotated:
        annotation, *extra = typing.get_args(annotation)
        constraints.extend(extra)
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        return " or ".join(_describe(member) for member in members)
    if origin in (tuple, list):
        return _describe(typing.get_args(annotation)[0])
    if origin is Literal:
        values = [str(value) for value in typing.get_args(annotation)]
        return values[0] if len(values) == 1 else "one of: " + ", ".join(values)
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return _describe_integer(constraints)
    if annotation is str:
        return "text"
    return getattr(annotation, "__name__", str(annotation))


def _describe_integer(constraints: list[Any]) -> str:
    bounds: dict[str, int] = {}
    for constraint in constraints:
        inner = constraint.metadata if isinstance(constraint, FieldInfo) else [constraint]
        for item in inner:
            for bound in ("ge", "le"):
                if isinstance(getattr(item, bound, None), int):
                    bounds[bound] = getattr(item, bound)
    low, high = bounds.get("ge"), bounds.get("le")
    if low is not None and high is not None:
        return f"an integer between {low} and {high}"
    if low == 0:
        return "a non-negative integer"
    if low == 1:
        return "a positive integer"
    if low is not None:
        return f"an integer of at least {low}"
    return "an integer"
