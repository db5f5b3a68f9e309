"""Built-in plugin: the embedded file store (SQLite in the data folder), or memory on request."""

from __future__ import annotations

from hive_core.persistence import FileSessionStore, MemorySessionStore
from hive_ext_api import ExtensionContext, SessionStore, hookimpl


@hookimpl(trylast=True)
def hive_session_store(context: ExtensionContext) -> SessionStore:
    persistence = getattr(context.node_config, "persistence", None)
    if persistence is not None and persistence.mode == "in-memory":
        return MemorySessionStore()
    node_dir = context.node_data_dir or context.data_dir
    if persistence is None:
        return FileSessionStore(node_dir)
    return FileSessionStore(node_dir, commit_interval=persistence.commit_interval / 1000,
                            sync=persistence.sync,
                            delivery_hold=persistence.hold_seconds)
