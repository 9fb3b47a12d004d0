#!/usr/bin/env bash
# Builds Benthos v4.24.0 (only the components the comparison needs: io, nats,
# pure) from the Go module proxy into a temporary directory, builds this
# relay, and runs `relay bench gateway -benthos` against an external NATS
# server: the gateway (`relay ingest`) and Benthos configured for the same job,
# each its own process, interleaved. Nothing of Benthos is kept in the repo.
#
#   scripts/bench-benthos.sh [relay bench gateway flags...]
#   NATS_URL=nats://127.0.0.1:4222 scripts/bench-benthos.sh -runs 5 -d 5s
#
# BENTHOS_BIN=/path/to/benthos skips the Benthos build; KEEP=1 keeps the
# temporary directory (its path is printed).
set -euo pipefail
cd "$(dirname "$0")/.."

BENTHOS_VERSION=v4.24.0
log() { printf '[bench-benthos] %s\n' "$*" >&2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench-benthos.XXXXXX")
if [ "${KEEP:-}" = 1 ]; then log "temporary directory: $tmp"; else trap 'rm -rf "$tmp"' EXIT; fi

benthos=${BENTHOS_BIN:-}
if [ -z "$benthos" ]; then
  log "building Benthos $BENTHOS_VERSION (io, nats, pure) in $tmp/benthos"
  mkdir -p "$tmp/benthos"
  cat >"$tmp/benthos/main.go" <<'GO'
package main

import (
	"context"

	"github.com/benthosdev/benthos/v4/public/service"

	_ "github.com/benthosdev/benthos/v4/public/components/io"
	_ "github.com/benthosdev/benthos/v4/public/components/nats"
	_ "github.com/benthosdev/benthos/v4/public/components/pure"
)

func main() { service.RunCLI(context.Background()) }
GO
  (
    cd "$tmp/benthos"
    export GOFLAGS=-mod=mod GOWORK=off
    go mod init bt >/dev/null 2>&1
    go get "github.com/benthosdev/benthos/v4@$BENTHOS_VERSION" >/dev/null 2>&1
    go mod tidy >/dev/null 2>&1
    go build -o benthos .
  )
  benthos=$tmp/benthos/benthos
fi
"$benthos" --version | head -1 >&2

log "building relay"
go build -o "$tmp/relay" ./cmd/relay

exec_args=(bench gateway -benthos "$benthos" -nats "${NATS_URL:-nats://127.0.0.1:4222}" "$@")
log "relay ${exec_args[*]}"
"$tmp/relay" "${exec_args[@]}"
