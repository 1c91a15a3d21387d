// Package loadtest is the harness behind `ensemble loadtest`: it drives
// running Ensemble replicas over real WebSocket connections (the wire
// protocol of docs/protocol.md), measures latency with HDR histograms and
// throughput over time, runs reference workloads side by side (a bare
// coder/websocket broadcast server, redis-benchmark, pgbench) and reports
// every Ensemble figure as a ratio to its reference, as JSON, Markdown and
// a hand-drawn SVG.
//
// Every target must be a loopback address (CheckLoopback); every scenario
// is bounded in duration and in connection and request counts.
//
// Scenarios:
//
//   - fanout: W workspaces × N watchers over R replicas, P sessions per
//     workspace streaming sim answers ("/sim stamp": every chunk carries the
//     agent's emission time) — chunk-to-watcher and commit-to-watcher latency.
//   - idle: C idle authenticated subscribed connections on one replica —
//     RSS and Go heap per connection, CPU while idle.
//   - submit: durable submits per second ("/sim instant") at several
//     concurrencies, errors counted.
//   - reconnect: C subscribed clients drop at once and reconnect with
//     full-jitter backoff and resume — time until all are resynced; gaps and
//     duplicates counted.
//   - approve: watchers racing to answer interactions (reported as not yet
//     possible while the server answers interaction.respond "unsupported").
package loadtest
