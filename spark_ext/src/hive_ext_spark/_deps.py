"""Optional dependencies: a missing one is refused with the extra that brings it."""

from __future__ import annotations

import importlib
from types import ModuleType

DISTRIBUTION = "hive-ext-spark"
EXTRAS = {"boto3": "s3", "botocore": "s3", "pyspark": "spark", "pyarrow": "spark", "tqdm": "spark"}


class MissingDependency(ImportError):
    """The message names the distribution and extra to install."""


def require(module: str, needed_for: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        extra = EXTRAS.get(top, "")
        hint = f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install {top}"
        raise MissingDependency(f"{needed_for} needs {top}, which is not installed ({exc}): "
                                f"{hint}") from exc
