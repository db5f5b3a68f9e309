"""Where the Spark job finds landed segments: a folder (local or shared) or an S3 prefix.

Both hold one sub-folder (or key prefix) per node, named by its node id, with the landed
segments the broker side wrote (``<segment>-<first seq>-<last seq>.events``). An input is
described by a small dict (:func:`input_spec`), so it travels to Spark's executors and is
opened there. No pyspark here.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from hive_ext_spark._files import CONSUMED_FILE, read_json, write_json_atomically
from hive_ext_spark._s3 import s3_client, split_s3_uri
from hive_ext_spark._segment import parse_landed_name

log = logging.getLogger("hive_ext_spark")


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A landed segment of one node in one input."""

    node_id: str
    number: int
    first_seq: int
    last_seq: int
    name: str  # file name; the key is <prefix><node id>/<name>
    size: int


class SegmentInput(Protocol):
    def list_segments(self) -> list[SegmentRef]: ...

    def read(self, ref: SegmentRef) -> bytes:
        """The segment's bytes; FileNotFoundError when it is gone."""
        ...

    def mark_consumed(self, node_id: str, segment: int) -> None:
        """Tell the node's event log that the job committed everything through ``segment``."""
        ...


class FolderInput:
    """``<root>/<node id>/*.events`` on a file system every executor sees."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)

    def list_segments(self) -> list[SegmentRef]:
        refs: list[SegmentRef] = []
        try:
            nodes = sorted(os.scandir(self.root), key=lambda e: e.name)
        except FileNotFoundError:
            return refs  # no node has written yet
        for node in nodes:
            if not node.is_dir():
                continue
            for entry in os.scandir(node.path):
                parsed = parse_landed_name(entry.name)
                if parsed is None:
                    continue
                try:
                    size = entry.stat().st_size
                except FileNotFoundError:
                    continue  # removed by retention while we looked
                refs.append(SegmentRef(node.name, *parsed, entry.name, size))
        return refs

    def read(self, ref: SegmentRef) -> bytes:
        return (self.root / ref.node_id / ref.name).read_bytes()

    def mark_consumed(self, node_id: str, segment: int) -> None:
        folder = self.root / node_id
        if read_json(folder / CONSUMED_FILE).get("segment") == segment:
            return
        try:
            write_json_atomically(folder / CONSUMED_FILE, {"segment": segment})
        except OSError as exc:  # a read-only share: retention just cannot tell what was taken
            log.warning("cannot write %s in %s: %s", CONSUMED_FILE, folder, exc)


class S3Input:
    """``s3://<bucket>/<prefix><node id>/*.events``."""

    def __init__(self, uri: str, region: str, endpoint_url: str | None,
                 path_style: bool) -> None:
        self.bucket, self.prefix = split_s3_uri(uri)
        self.client = s3_client(region=region, endpoint_url=endpoint_url, path_style=path_style,
                                needed_for=f"reading {uri}")

    def list_segments(self) -> list[SegmentRef]:
        refs: list[SegmentRef] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                      Prefix=self.prefix)
        for page in pages:
            for item in page.get("Contents", ()):
                node_id, _, name = item["Key"][len(self.prefix):].partition("/")
                parsed = parse_landed_name(name)
                if parsed is not None and node_id and "/" not in name:
                    refs.append(SegmentRef(node_id, *parsed, name, int(item["Size"])))
        return refs

    def read(self, ref: SegmentRef) -> bytes:
        key = f"{self.prefix}{ref.node_id}/{ref.name}"
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
        except self.client.exceptions.NoSuchKey:
            raise FileNotFoundError(f"s3://{self.bucket}/{key}") from None
        return bytes(answer["Body"].read())

    def mark_consumed(self, node_id: str, segment: int) -> None:
        """Nothing: the node removes what it shipped; the bucket's lifecycle rules the rest."""


def input_spec(location: str, s3_region: str = "us-east-1", s3_endpoint: str | None = None,
               s3_path_style: bool = False) -> dict[str, Any]:
    if location.startswith("s3://"):
        split_s3_uri(location)  # a clear error now rather than on an executor
        return {"kind": "s3", "uri": location, "region": s3_region, "endpoint": s3_endpoint,
                "path_style": s3_path_style}
    if "://" in location and not location.startswith("file://"):
        raise ValueError(f"input {location!r}: expected a folder or s3://BUCKET/PREFIX "
                         "(Spark's s3a:// is not used: give the bucket as s3://)")
    return {"kind": "folder", "root": str(Path(location.removeprefix("file://")).resolve())}


def open_input(spec: dict[str, Any]) -> SegmentInput:
    if spec["kind"] == "s3":
        return S3Input(spec["uri"], spec["region"], spec["endpoint"], spec["path_style"])
    return FolderInput(spec["root"])
