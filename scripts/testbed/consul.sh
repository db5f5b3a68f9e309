#!/usr/bin/env bash
# The Consul discovery tests' server: the consul binary of Debian bullseye (Consul 1.8.7; bookworm
# has no consul package) in .tools/bin, fetched with a private apt state so the system's apt
# configuration is untouched. The tests start their own agent in dev mode. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."

DEST=.tools/bin
[ -x "$DEST/consul" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "testbed/consul.sh: run as root to fetch consul into $DEST" >&2
  exit 0
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/state/lists/partial" "$W/cache/archives/partial" "$DEST"
URI=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
URI=${URI:-$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)}
if [ -z "$URI" ]; then
  echo "testbed/consul.sh: no Debian mirror found in /etc/apt/sources.list.d/debian.sources" >&2
  exit 1
fi
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $URI bullseye main" \
  > "$W/sources.list"
O=(-o Dir::State="$W/state" -o Dir::Cache="$W/cache" -o Dir::Etc::SourceList="$W/sources.list"
   -o Dir::Etc::SourceParts=/dev/null -o Dir::State::status=/var/lib/dpkg/status
   -o APT::Sandbox::User=root)
apt-get "${O[@]}" -qq update
(cd "$W" && apt-get "${O[@]}" -qq download consul)
dpkg-deb -x "$W"/consul_*.deb "$W/x"
install -m 0755 "$W/x/usr/bin/consul" "$DEST/consul"
version=$("$DEST/consul" version) && echo "${version%%$'\n'*}"  # no pipe: head would SIGPIPE consul under pipefail
