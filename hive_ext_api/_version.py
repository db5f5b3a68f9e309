"""Names and the version of the extension API."""

PROJECT_NAME = "hive"
"""The pluggy project name of every Hive hook."""

ENTRY_POINT_GROUP = "hive.extensions"
"""The entry-point group an installed extension registers its module under."""

API_VERSION = "1.9"
"""The version of this API. Extensions declare the range they support as ``HIVE_API``."""
