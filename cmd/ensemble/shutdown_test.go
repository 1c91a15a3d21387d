package main

import (
	"net/http"
	"syscall"
	"testing"
	"time"
)

// A graceful stop (SIGTERM) mid-turn settles the turn before the process
// exits: its outcome is unknown (the agent was stopped mid-work, so it is
// failed/execution_status_unknown, never a guess), and its stop reason
// says it was a planned restart, so people do not read it as a crash.
func TestGracefulShutdownMarksInFlightTurns(t *testing.T) {
	dataDir := t.TempDir()
	p := startServer(t, dataDir)
	var created struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if code := p.call(t, http.MethodPost, "/sessions", map[string]any{}, &created); code != http.StatusCreated {
		t.Fatalf("session.create: %d", code)
	}
	sid := created.Session.ID
	var sent struct {
		Turn wireTurn `json:"turn"`
	}
	if code := p.call(t, http.MethodPost, "/sessions/"+sid+"/messages", map[string]any{
		"clientSubmitId": "term-1", "content": map[string]any{"text": "/sim hang"},
	}, &sent); code != http.StatusOK {
		t.Fatalf("submit: %d", code)
	}
	for deadline := time.Now().Add(20 * time.Second); p.turn(t, sid).Phase != "durably_accepted"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the turn never started: %+v", p.turn(t, sid))
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not exit on SIGTERM; stderr:\n%s", p.stderr)
	}
	q := startServer(t, dataDir)
	tr := q.turn(t, sid)
	if tr.ID != sent.Turn.ID || tr.Outcome != "failed" || tr.FailureReason != "execution_status_unknown" || tr.StopReason != "server_shutdown" {
		t.Fatalf("after a graceful restart the turn reads %+v", tr)
	}
}
