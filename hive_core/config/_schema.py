"""The XML shape of a config model, read from its pydantic-xml field declarations.

The loader uses it twice: to refuse elements and attributes no model declares (naming the
element and its line), and to find the element a pydantic validation error is about.
"""

from __future__ import annotations

import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union

from pydantic_xml import BaseXmlModel
from pydantic_xml.fields import extract_field_xml_entity_info
from pydantic_xml.typedefs import EntityLocation

__all__ = ["ModelShape", "Slot", "model_shape"]


@dataclass(frozen=True)
class Slot:
    """Where one model field lives in XML.

    An attribute (``attribute`` set), or elements under the model's element: first the
    ``wrappers`` chain (``<protocols>`` for a list of ``<protocol>``), then one element (or
    several when ``many``) whose tag is a key of ``tags``; the value says which model parses
    that element, None for a text value.
    """

    field_name: str
    annotation: Any
    attribute: str | None = None
    wrappers: tuple[str, ...] = ()
    tags: dict[str, type[BaseXmlModel] | None] = field(default_factory=dict)
    many: bool = False

    @property
    def outer_tags(self) -> tuple[str, ...]:
        """The tags that may appear directly under the model's element for this slot."""
        return (self.wrappers[0],) if self.wrappers else tuple(self.tags)


@dataclass(frozen=True)
class ModelShape:
    model: type[BaseXmlModel]
    slots: dict[str, Slot]
    by_outer_tag: dict[str, Slot]
    attributes: dict[str, Slot]


def _unwrap(annotation: Any) -> tuple[list[Any], bool]:
    """The non-None members of ``annotation`` and whether it is a tuple/list of them."""
    many = False
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (tuple, list):
            many = True
            annotation = typing.get_args(annotation)[0]
        else:
            break
    if typing.get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
    else:
        members = [annotation]
    return members, many


def _model_of(annotation: Any) -> type[BaseXmlModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseXmlModel):
        return annotation
    return None


def item_annotation(annotation: Any) -> Any:
    """The type of one value: ``tuple[Port, ...] | None`` -> ``Port``."""
    members, _ = _unwrap(annotation)
    if len(members) == 1:
        return members[0]
    if all(typing.get_origin(m) is Literal for m in members):
        return Literal[tuple(a for m in members for a in typing.get_args(m))]
    return Union[tuple(members)]  # noqa: UP007 - built from a runtime tuple


@functools.cache
def model_shape(model: type[BaseXmlModel]) -> ModelShape:
    slots: dict[str, Slot] = {}
    for name, info in model.model_fields.items():
        entity = extract_field_xml_entity_info(info)
        if entity is None:
            continue
        members, many = _unwrap(info.annotation)
        models = [m for m in (_model_of(a) for a in members) if m is not None]
        if entity.location is EntityLocation.ATTRIBUTE:
            slots[name] = Slot(name, info.annotation, attribute=entity.path or name)
            continue
        wrappers: tuple[str, ...] = ()
        if entity.location is EntityLocation.WRAPPED:
            wrappers = tuple((entity.path or "").split("/"))
            entity = entity.wrapped
            assert entity is not None
        tags: dict[str, type[BaseXmlModel] | None]
        if entity.path:
            tags = {entity.path: models[0] if models else None}
        elif models:
            tags = {m.__xml_tag__ or m.__name__: m for m in models}
        else:
            tags = {name: None}
        slots[name] = Slot(name, info.annotation, wrappers=wrappers, tags=tags, many=many)
    by_outer_tag = {tag: slot for slot in slots.values() for tag in slot.outer_tags}
    attributes = {s.attribute: s for s in slots.values() if s.attribute is not None}
    return ModelShape(model, slots, by_outer_tag, attributes)
