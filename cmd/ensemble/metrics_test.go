package main

import "testing"

// TestSQLiteGroupCommitMetrics: an embedded server reports its SQLite
// commits and the updates they made durable, and a Turn moves both (its
// admission, dispatch, acceptance, output and settlement are updates).
func TestSQLiteGroupCommitMetrics(t *testing.T) {
	p := startServer(t, t.TempDir())
	commits0 := metric(t, p, "ensemble_sqlite_commits_total")
	updates0 := metric(t, p, "ensemble_sqlite_updates_committed_total")
	sid := p.createSession(t)
	tr := p.submit(t, sid, "metrics-1", "/sim words=20 rate=1ms")
	p.waitTurnOutcome(t, sid, tr.ID, "completed")
	commits := metric(t, p, "ensemble_sqlite_commits_total") - commits0
	updates := metric(t, p, "ensemble_sqlite_updates_committed_total") - updates0
	if commits < 4 || updates < commits {
		t.Fatalf("a session and a Turn: %v commits for %v updates; want at least 4, and no fewer updates than commits", commits, updates)
	}
}
