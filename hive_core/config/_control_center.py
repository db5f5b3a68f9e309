"""<control-center>: the web pages an operator looks at the cluster with.

Off unless enabled, and then on its own listener (HTTP on 127.0.0.1:8080 unless told
otherwise), never on an MQTT or REST API port. Every page needs a login: the users are listed
here with password hashes (`hive rest-api hash-password` makes one), never passwords.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, model_validator
from pydantic_xml import element, wrapped

from ._base import ConfigModel, XmlBool, misplaced
from ._rest_api import HttpListener, HttpsListener, _password_hash, _user_name, refuse_twice

__all__ = ["ControlCenter", "ControlCenterUser"]

DEFAULT_PORT = 8080


class ControlCenterUser(ConfigModel, tag="user"):
    """One user who may log in to the control center."""

    name: Annotated[str, AfterValidator(_user_name)] = element(tag="name")
    """The user name (shown in the log next to every action the user takes)."""
    password_hash: Annotated[str, AfterValidator(_password_hash)] = element(tag="password-hash")
    """The password as a scrypt or pbkdf2-sha256 hash from `hive rest-api hash-password`,
    never the password itself."""


class ControlCenter(ConfigModel, tag="control-center"):
    """<control-center>: off unless enabled; enabled with no <listeners> means HTTP on
    127.0.0.1:8080."""

    enabled: XmlBool = element(tag="enabled", default=False)
    """Whether the node serves the control center."""
    listeners: tuple[HttpListener | HttpsListener, ...] = wrapped(
        "listeners", element(), default=())
    """Its <http> and <https> listeners; none: HTTP on 127.0.0.1:8080."""
    session_timeout: Annotated[int, Field(ge=5, le=7 * 24 * 3600)] = element(
        tag="session-timeout", default=3600)
    """Seconds a login lasts without being used (5 to 604800); then the user logs in again."""
    users: tuple[ControlCenterUser, ...] = wrapped("users", element(tag="user"), default=())
    """Who may log in."""

    def effective_listeners(self) -> tuple[HttpListener | HttpsListener, ...]:
        return self.listeners or (HttpListener(port=DEFAULT_PORT),)

    @model_validator(mode="after")
    def _users_when_enabled(self) -> ControlCenter:
        if self.enabled and not self.users:
            raise misplaced("enabled", "the control center is enabled but no <users> are "
                                       "configured: nobody could log in")
        refuse_twice(self.users)
        return self
