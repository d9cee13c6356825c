#!/usr/bin/env bash
# Installs what `make test` needs on a fresh Debian machine, only when it is missing.
# Fails loudly, with the package to install, when it cannot.
set -euo pipefail

need_apt=()
command -v cargo >/dev/null || { echo "deps: cargo is required (install a Rust toolchain)" >&2; exit 1; }
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
# PostgreSQL's server programs (initdb, postgres; Debian keeps them under
# /usr/lib/postgresql/<major>/bin) and psql: the admin store's tests start a real server.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || need_apt+=(postgresql)
command -v psql >/dev/null || need_apt+=(postgresql-client)
command -v chromium >/dev/null || need_apt+=(chromium)
command -v python3 >/dev/null || need_apt+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)
command -v php >/dev/null || need_apt+=(php-cli)
command -v buildah >/dev/null || need_apt+=(buildah)
command -v curl >/dev/null || need_apt+=(curl)
command -v strip >/dev/null || need_apt+=(binutils)

apt_install() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "deps: missing $*; install with: sudo apt-get install -y $*" >&2
    exit 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if [ ${#need_apt[@]} -gt 0 ]; then
  apt_install "${need_apt[@]}"
fi
echo "deps: ok"
