"""What every config model shares: immutability, and the value types config.xml uses."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, ConfigDict, Field
from pydantic_xml import BaseXmlModel

__all__ = [
    "BindPort",
    "ClientAuthenticationMode",
    "ConfigModel",
    "Milliseconds",
    "NonNegativeInt",
    "Port",
    "PositiveInt",
    "TlsProtocol",
    "XmlBool",
    "misplaced",
]


class ConfigModel(BaseXmlModel, search_mode="unordered"):
    """Base of every element model: frozen, and children may come in any order."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    # extra="ignore": unknown elements are refused earlier, by the loader's schema walk,
    # which can name the element and its line; pydantic-xml's own check cannot do both.


def _xml_boolean(value: object) -> object:
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "false"):
            return word == "true"
        raise ValueError("expected true or false")
    return value


XmlBool = Annotated[bool, BeforeValidator(_xml_boolean)]
"""``true`` or ``false`` (any case), as in XML Schema; not pydantic's yes/on/1."""

Port = Annotated[int, Field(ge=0, le=65535)]
"""A TCP/UDP port; 0 asks the OS for a free one (handy in tests) or means "not set"."""

BindPort = Annotated[int, Field(ge=0, le=65535)]
PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Milliseconds = Annotated[int, Field(ge=1)]

ClientAuthenticationMode = Literal["NONE", "OPTIONAL", "REQUIRED"]
TlsProtocol = Literal["TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"]

# A model validator that checks several fields at once can only be placed by pydantic on the
# model's own element; this prefix lets it name the child element the problem is really about.
# The loader strips it again (see _loader._problem).
MISPLACED_PREFIX = "[at "


def misplaced(at: str, message: str) -> ValueError:
    """A ValueError for a model validator, pointing at child element path ``at`` ("a/b")."""
    return ValueError(f"{MISPLACED_PREFIX}{at}] {message}")
