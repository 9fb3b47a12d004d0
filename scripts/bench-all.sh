#!/usr/bin/env bash
# Runs the "Latest run" benchmarks of docs/benchmarks.md one after another, each target
# beside its ceiling in the same run, and writes each one's output to a
# directory (default ./bench-out): the whole relay vs the gateway alone
# (relay bench serve), the loop idle and with a busy core, bus.Publish vs raw
# JetStream, a tool call vs the raw go-sdk call, the memory worker on one hot
# thread, and the gateway vs Benthos (scripts/bench-benthos.sh).
#
#   scripts/bench-all.sh                       # about 10 minutes on 2 cores
#   BASELINE=/path/to/older/relay scripts/bench-all.sh
#   BENTHOS_BIN=/path/to/benthos OUT=/tmp/run scripts/bench-all.sh
#
# Needs what the test suite needs (scripts/setup.sh: the npm fixtures, the
# external NATS server at NATS_URL for the Benthos comparison). Run it on an
# idle machine: other work moves these figures more than most changes do.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${OUT:-bench-out}
mkdir -p "$out"
export CI=${CI:-true} NATS_URL=${NATS_URL:-nats://127.0.0.1:4222}
bin=$(mktemp -d "${TMPDIR:-/tmp}/bench-all.XXXXXX")
trap 'rm -rf "$bin"' EXIT
log() { printf '[bench-all] %s\n' "$*" >&2; echo "$(date -u +%FT%TZ) $* | load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/meta.txt"; }

log "building at $(git log --oneline -1 | cut -c1-60)"
go build -o "$bin/relay" ./cmd/relay
for pkg in internal/cli bus tools services/memory; do
  go test -c -o "$bin/$(basename "$pkg").test" "./$pkg"
done

log "relay bench serve"
serve=(bench serve -runs 5 -d 10s)
if [ -n "${BASELINE:-}" ]; then serve+=(-baseline "$BASELINE"); fi
"$bin/relay" "${serve[@]}" >"$out/serve.txt" 2>&1

log "the loop"
(cd internal/cli && "$bin/cli.test" -test.run '^$' -test.bench WebhookToSuggestion -test.benchtime 1000x -test.count 3) >"$out/loop.txt" 2>&1
log "bus.Publish"
(cd bus && "$bin/bus.test" -test.run '^$' -test.bench 'Publish$' -test.benchtime 20000x -test.count 3) >"$out/publish.txt" 2>&1
log "tool call"
(cd tools && "$bin/tools.test" -test.run '^$' -test.bench EchoStdio -test.benchtime 10000x -test.count 3) >"$out/tool.txt" 2>&1
log "memory worker, one hot thread"
(cd services/memory && "$bin/memory.test" -test.run '^$' -test.bench HotThread -test.count 3) >"$out/hot.txt" 2>&1

log "gateway vs Benthos"
bash scripts/bench-benthos.sh -runs 5 -d 5s >"$out/benthos.txt" 2>&1
log "done: $out"
