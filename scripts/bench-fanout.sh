#!/usr/bin/env bash
# Fanout at the default shape, several ensemble binaries interleaved
# (a b b a a b …), one line per run with the chunk latency, the ratio to
# the bare broadcast server, and PostgreSQL's CPU per canonical chunk.
#
#   scripts/bench-fanout.sh /tmp/ens-before /tmp/ens-after        # one replica, SQLite
#   REPLICAS=2 RUNS=3 scripts/bench-fanout.sh /tmp/ens-before /tmp/ens-after
#   LOADTEST_ARGS=--stagger scripts/bench-fanout.sh /tmp/ens   # more loadtest flags
#
# With REPLICAS>1 each run gets a fresh database on ENSEMBLE_TEST_DATABASE_URL's
# server (dropped afterwards) and Redis at REDIS_URL. PostgreSQL's CPU is
# read from /proc (every process of the postgres user, reaped backends
# included), so run it as a user that can read them, on a machine where
# nothing else uses that server.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 BINARY [BINARY...]" >&2; exit 2; }
runs=${RUNS:-3}
replicas=${REPLICAS:-1}
duration=${DURATION:-15s}
url=${ENSEMBLE_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
redis=${REDIS_URL:-redis://127.0.0.1:6379/6}
base=${url%%\?*}
query=${url#"$base"}

pgcpu() { # CPU seconds of the postgres user's processes, children included
	local t=0 v p
	for p in $(pgrep -u postgres || true); do
		v=$(awk '{print $14+$15+$16+$17}' "/proc/$p/stat" 2>/dev/null || echo 0)
		t=$((t + v))
	done
	echo "scale=2; $t/$(getconf CLK_TCK)" | bc
}

run() {
	local bin=$1 n=$2 out db args=()
	out=$(mktemp -d)
	if [ "$replicas" -gt 1 ]; then
		db="ensemble_fanout_$$_$n"
		psql -X -q "$url" -c "CREATE DATABASE $db"
		args=(--replicas "$replicas" --redis-url "$redis" --database-url "${base%/*}/${db}${query}")
	fi
	local l0 c0 c1 l1
	l0=$(cut -d' ' -f1 /proc/loadavg); c0=$(pgcpu)
	# --no-commit-floor: its pgbench would count in PostgreSQL's CPU below.
	"$bin" loadtest --scenarios fanout --no-external --no-commit-floor --duration "$duration" --quiet --out "$out" "${args[@]}" ${LOADTEST_ARGS:-} >"$out/stdout.txt" 2>&1
	c1=$(pgcpu); l1=$(cut -d' ' -f1 /proc/loadavg)
	[ -n "${db:-}" ] && psql -X -q "$url" -c "DROP DATABASE IF EXISTS $db"
	local chunks p50 p99
	chunks=$(grep -o 'chunks emitted (canonical) [0-9]*' "$out/stdout.txt" | grep -o '[0-9]*$')
	p50=$(grep '| p50 chunk latency' "$out/stdout.txt" | cut -d'|' -f3 | xargs)
	p99=$(grep '| p99 chunk latency' "$out/stdout.txt" | cut -d'|' -f3-5 | tr -s ' ')
	# p50 / p99 of the answers' first chunks (the events that create their
	# message, 1 % of the deliveries) and of the appended ones.
	local first appended
	first=$(grep '| Ensemble chunk, in the event that creates its message (message_update): agent emission → watcher' "$out/stdout.txt" | cut -d'|' -f4,6 | tr -s ' ')
	appended=$(grep '| Ensemble chunk, appended (message_delta): agent emission → watcher' "$out/stdout.txt" | cut -d'|' -f4,6 | tr -s ' ')
	# p99 of the appended chunks away from the Turn boundaries: neither
	# among an answer's first ten nor its last ten (empty from an older
	# binary that does not report it).
	local rest
	rest=$(grep '| Ensemble chunk, appended, the rest of the answer: agent emission → watcher' "$out/stdout.txt" | cut -d'|' -f6 | tr -s ' ')
	printf '%s run %d: p50 %s | p99 / bare / ratio %s | first chunk p50/p99%s| appended p50/p99%s| mid-answer p99%s| pg CPU %s ms per chunk | load %s->%s | %s\n' \
		"$(basename "$bin")" "$n" "$p50" "$p99" "$first" "$appended" "${rest:- - }" "$(echo "scale=3; ($c1 - $c0) * 1000 / ${chunks:-1}" | bc)" \
		"$l0" "$l1" "$(grep -o 'gaps [0-9]*, duplicates [0-9]*' "$out/stdout.txt" | head -1)"
	rm -rf "$out"
}

n=0
for ((r = 0; r < runs; r++)); do
	order=("$@")
	if ((r % 2 == 1)); then # a b, then b a: neither side always runs first
		order=()
		for ((i = $#; i >= 1; i--)); do order+=("${!i}"); done
	fi
	for bin in "${order[@]}"; do
		n=$((n + 1))
		run "$bin" "$n"
	done
done
