# Hive's container image: `docker build -t hive .` (README, "Containers").
#
# Two stages: the first installs hive-broker and its dependencies into a virtual environment,
# the second copies only that environment onto a fresh Python base, so the image holds no
# source tree, no build tools and no pip cache. The node runs as an unprivileged user, keeps its
# data in the volume /var/lib/hive and reads /etc/hive/config.xml: mount your own there, or set
# the environment variables the default one reads (docker/config.xml).
#
# Build arguments:
#   PYTHON_IMAGE  the Python base of both stages (3.11 or newer; glibc based, for the wheels)
#   EXTENSIONS    extension distributions to install too, e.g. "hive-ext-consul hive-ext-s3"
#   PIP_OPTIONS   extra pip options; for a build without a package index, put the wheels in
#                 docker/wheels/ and give "--no-index --find-links /wheels"
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG EXTENSIONS=""
ARG PIP_OPTIONS=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
COPY docker/wheels/ /wheels/
COPY pyproject.toml README.md /src/
COPY hive_core /src/hive_core
COPY hive_ext_api /src/hive_ext_api
RUN python3 -m venv /opt/hive \
 && /opt/hive/bin/python -m pip install ${PIP_OPTIONS} /src ${EXTENSIONS} \
 && /opt/hive/bin/python -m pip check \
 && /opt/hive/bin/python -m compileall -q /opt/hive/lib

FROM ${PYTHON_IMAGE}
ARG HIVE_UID=10001
# The node's user, without a login shell; its home is the data folder.
RUN echo "hive:x:${HIVE_UID}:${HIVE_UID}:Hive MQTT broker:/var/lib/hive:/sbin/nologin" >> /etc/passwd \
 && echo "hive:x:${HIVE_UID}:" >> /etc/group \
 && mkdir -p /var/lib/hive /etc/hive \
 && chown ${HIVE_UID}:${HIVE_UID} /var/lib/hive
COPY --from=build /opt/hive /opt/hive
COPY docker/config.xml /etc/hive/config.xml
ENV PATH=/opt/hive/bin:$PATH PYTHONUNBUFFERED=1
USER hive
WORKDIR /var/lib/hive
VOLUME ["/var/lib/hive"]
# MQTT (the default config has no cluster, and its REST API is on loopback; a cluster's
# config publishes its node port, 8000 in docker/cluster.xml, itself)
EXPOSE 1883
# Ready: listeners open, cluster joined and synced (the health probes need no credentials).
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s --retries=3 CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8888/api/v1/health/readiness', timeout=2)"]
# SIGTERM (docker stop) is a graceful stop: the node hands its data over before it exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["hive"]
CMD ["run", "--config", "/etc/hive/config.xml", "--data-dir", "/var/lib/hive/data", "--backup-dir", "/var/lib/hive/backup"]
