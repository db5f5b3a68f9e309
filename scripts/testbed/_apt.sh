# Sourced by the test bed scripts: apt_install WHO PACKAGE... installs the packages (none: nothing
# to do) with Debian's apt, as root, and ends the script if apt fails; not as root, WHO says what
# to install and it answers 1.
apt_install() {
  local who=$1
  shift
  [ $# -gt 0 ] || return 0
  if [ "$(id -u)" != 0 ]; then
    echo "$who: please install: $* (sudo apt-get install $*)" >&2
    return 1
  fi
  # (called as `apt_install ... || ...`, where set -e does not apply)
  apt-get update -qq || exit
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" || exit
}
