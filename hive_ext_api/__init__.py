"""The public, stable API for Hive extensions.

Extensions import this package only, never ``hive_core``. It grows with the extension SDK.
"""

API_VERSION = "0.1"

__all__ = ["API_VERSION"]
