#!/usr/bin/env bash
# Durable submits per second on PostgreSQL next to pgbench on the same
# server, at the same client counts, in one run; prints both and the ratio.
#
#   scripts/bench-pg.sh                  # 1, 8 and 32 clients, 10 s each
#   BENCH_TIME=30s CLIENTS="1 8" scripts/bench-pg.sh
#
# The server is ENSEMBLE_TEST_DATABASE_URL (default: the loopback test
# server with trust auth). The Go benchmark (BenchmarkDurableSubmit in pg/)
# works in a scratch schema of that database; pgbench works in a scratch
# database this script creates with `pgbench -i` and drops on exit. Needs
# go, psql and pgbench (Debian: postgresql-client).
set -euo pipefail
cd "$(dirname "$0")/.."

url=${ENSEMBLE_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
bench_time=${BENCH_TIME:-10s}
clients=${CLIENTS:-1 8 32}
scale=${PGBENCH_SCALE:-10}
seconds=${bench_time%s}

for tool in go psql pgbench; do
	command -v "$tool" >/dev/null || { echo "bench-pg: $tool is not installed" >&2; exit 1; }
done

# The scratch database for pgbench lives on the same server: same URL with
# another database name.
scratch="ensemble_pgbench_$$"
base=${url%%\?*}
query=${url#"$base"}
scratch_url="${base%/*}/${scratch}${query}"

psql -X -q "$url" -c "CREATE DATABASE ${scratch}"
trap 'psql -X -q "$url" -c "DROP DATABASE IF EXISTS ${scratch}" >/dev/null 2>&1 || true' EXIT
pgbench -i -q -s "$scale" "$scratch_url" >/dev/null 2>&1

echo "server: $(psql -X -At "$url" -c 'SHOW server_version') · synchronous_commit=$(psql -X -At "$url" -c 'SHOW synchronous_commit') · $(nproc) CPUs · load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "each point: BenchmarkDurableSubmit for ${bench_time}, then pgbench -N -M prepared for ${seconds}s (scale ${scale})"
echo

go test -c -o /tmp/ensemble-pg-bench.$$ ./pg/ >/dev/null
trap 'rm -f /tmp/ensemble-pg-bench.$$; psql -X -q "$url" -c "DROP DATABASE IF EXISTS ${scratch}" >/dev/null 2>&1 || true' EXIT

# busy reads the machine's CPU counters (/proc/stat: all CPUs, jiffies):
# "busy total". cores_between prints how many cores were busy on average
# between two readings: near $(nproc), the run was CPU-bound and its rate
# is what the machine's cores allow, whatever the round trips.
busy() { awk '/^cpu / {b = $2 + $3 + $4 + $7 + $8 + $9; print b, b + $5 + $6}' /proc/stat; }
cores_between() {
	awk -v a="$1" -v b="$2" -v n="$(nproc)" 'BEGIN {split(a, x, " "); split(b, y, " ");
		t = y[2] - x[2]; if (t <= 0) t = 1; printf "%.2f", n * (y[1] - x[1]) / t}'
}

printf '%8s  %14s  %12s  %14s  %12s  %10s  %12s  %12s  %12s  %12s\n' clients "submits/s" "tx/submit" "stmts/submit" "rtt/submit" "pgbench tps" "ratio" "tx ratio" "busy cores" "pgb cores"
for c in $clients; do
	b0=$(busy)
	out=$(ENSEMBLE_TEST_DATABASE_URL="$url" /tmp/ensemble-pg-bench.$$ -test.run '^$' \
		-test.bench "BenchmarkDurableSubmit/clients=${c}\$" -test.benchtime "$bench_time" 2>&1) || { echo "$out" >&2; exit 1; }
	cores=$(cores_between "$b0" "$(busy)")
	line=$(grep -E "^BenchmarkDurableSubmit/clients=${c}(-[0-9]+)?[[:space:]]" <<<"$out" | tail -n 1)
	metric() { awk -v m="$1" '{for (i = 2; i <= NF; i++) if ($i == m) print $(i-1)}' <<<"$line"; }
	submits=$(metric submits/s)
	txs=$(metric tx/submit)
	stmts=$(metric stmts/submit)
	# Round trips (a pgx.Batch counts once); "-" from a build that does not
	# report them.
	rtt=$(metric rtt/submit)
	rtt=${rtt:--}
	threads=$(( c < $(nproc) ? c : $(nproc) ))
	b0=$(busy)
	tps=$(pgbench -N -M prepared -c "$c" -j "$threads" -T "$seconds" "$scratch_url" 2>/dev/null |
		awk -F'= ' '/^tps/ {split($2, a, " "); print a[1]}')
	pgcores=$(cores_between "$b0" "$(busy)")
	ratio=$(awk -v a="$submits" -v b="$tps" 'BEGIN {printf "%.3f", a / b}')
	txratio=$(awk -v a="$submits" -v t="$txs" -v b="$tps" 'BEGIN {printf "%.3f", a * t / b}')
	printf '%8s  %14.1f  %12.1f  %14.1f  %12s  %10.1f  %12s  %12s  %12s  %12s\n' "$c" "$submits" "$txs" "$stmts" "$rtt" "$tps" "$ratio" "$txratio" "$cores" "$pgcores"
	grep -E "^BenchmarkDurableSubmit" <<<"$out" | sed 's/^/    /' >&2
done
echo
echo "ratio = durable submits/s ÷ pgbench tps; tx ratio = (submits/s × transactions per submit) ÷ pgbench tps"
echo "busy cores / pgb cores = the machine's average busy CPUs during the benchmark / during pgbench (of $(nproc))"
