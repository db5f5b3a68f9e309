"""A publish interceptor that does nothing: what one hook call per message costs.

    bench/run.py --scenarios qos0,qos1 --extra-hive-cmd \
        "env PYTHONPATH=$PWD/bench/extensions $PWD/.venv/bin/hive run --config {config} \
         --data-dir {data_dir} --extension noop_interceptor"
"""

from hive_ext_api import ClientInfo, PublishMessage, hookimpl


@hookimpl
def hive_intercept_publish_inbound(client: ClientInfo, publish: PublishMessage) -> None:
    return None
