"""The broker side needs neither Spark, Arrow nor boto3; missing ones are named with the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCK = textwrap.dedent("""
    import importlib.abc, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("pyspark", "pyarrow", "boto3", "botocore", "py4j"):
                raise ImportError(f"No module named {name!r} (blocked by the test)")
            return None

    sys.meta_path.insert(0, Block())
""")


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=60)


def in_a_node(data: object, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with the extension as ``ext`` and a ``context`` for node-x, whose data
    folder is ``data``."""
    return run(textwrap.dedent(f"""
        import logging, pathlib
        from hive_ext_api import ExtensionContext
        import hive_ext_spark as ext

        class Services:
            node_id = "node-x"
            metrics = None

        data = pathlib.Path({str(data)!r})
        context = ExtensionContext("spark", data, Services(), logging.getLogger("t"))
    """) + textwrap.dedent(code))


def test_the_broker_side_runs_without_spark_arrow_or_boto3(tmp_path: object) -> None:
    done = in_a_node(tmp_path, """
        class Received:  # what the node hands over (hive_ext_api.ReceivedPublish)
            topic, payload, qos, retain = "t", b"x", 0, False
            publisher_id, has_properties = "c", False

        ext.hive_extension_start(context)
        ext.hive_publishes_received([Received()])
        ext.hive_extension_stop(context)
        print(len(list((data / "events" / "node-x").glob("*.events"))))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"


def test_the_spark_side_names_the_extra_to_install() -> None:
    done = run("""
        from hive_ext_spark._deps import MissingDependency
        try:
            import hive_ext_spark.stream
        except MissingDependency as exc:
            print(exc)
    """)
    assert "the Spark job needs pyspark" in done.stdout
    assert "pip install 'hive-ext-spark[spark]'" in done.stdout
    cli = run("""
        import sys
        from hive_ext_spark.cli import main
        sys.exit(main(["stream", "--input", "x", "--output", "y", "--checkpoint", "z"]))
    """)
    assert cli.returncode == 2
    assert "pip install 'hive-ext-spark[spark]'" in cli.stderr


def test_s3_shipping_without_boto3_refuses_and_names_the_extra(tmp_path: object) -> None:
    done = in_a_node(tmp_path, """
        import os
        from hive_ext_api import ExtensionRefused

        (data / "spark.properties").write_text("s3-bucket-name = events\\n")
        os.environ.pop("HIVE_SPARK_CONFIG", None)
        try:
            ext.hive_extension_start(context)
        except ExtensionRefused as exc:
            print(exc)
    """)
    assert "s3-bucket-name needs boto3" in done.stdout, done.stderr
    assert "pip install 'hive-ext-spark[s3]'" in done.stdout
