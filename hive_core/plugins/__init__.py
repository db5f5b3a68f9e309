"""Loading extensions, the typed facade over their hooks, and Hive's built-in plugins."""

from hive_core.plugins._facade import Extensions
from hive_core.plugins._hook_clock import BUCKETS_SECONDS as HOOK_BUCKETS_SECONDS
from hive_core.plugins._hook_clock import HookTime
from hive_core.plugins._lan import WarningGate
from hive_core.plugins._local import ACCEPTED as LOCAL_EXTENSION_FORMS
from hive_core.plugins._local import LocalExtensionError, import_local_extension, module_version
from hive_core.plugins._manager import (
    BUILTIN_PLUGINS,
    DISABLED_BY_OPERATOR,
    DISABLED_ENV,
    ExtensionManager,
    ExtensionRecord,
)

__all__ = ["BUILTIN_PLUGINS", "DISABLED_BY_OPERATOR", "DISABLED_ENV", "HOOK_BUCKETS_SECONDS",
           "LOCAL_EXTENSION_FORMS", "ExtensionManager", "ExtensionRecord", "Extensions", "HookTime",
           "LocalExtensionError", "WarningGate", "import_local_extension", "module_version"]
