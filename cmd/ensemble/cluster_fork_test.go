package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Real replicas on PostgreSQL + Redis: a fork and a settings change asked
// of the replica that does not run the session are made by the one that
// does (its agent holds the provider session), and both replicas then read
// the same canonical result.
func TestClusterForkAndSettingsOnAnotherReplica(t *testing.T) {
	c := newCluster(t, clusterRedis(t), 2)
	a, b := c.replicas[0], c.replicas[1]
	if err := os.MkdirAll(filepath.Join(c.dataDir, "work", "proj"), 0o755); err != nil {
		t.Fatal(err)
	}
	sid := c.createSession(a)
	turnID := c.submit(a, sid, "cf-1", "/sim words=5")
	if tr := c.waitSettled(a, sid, turnID); tr.Outcome != "completed" {
		t.Fatalf("turn: %+v", tr)
	}

	var forked struct {
		Session struct {
			ID    string `json:"id"`
			Title string `json:"title"`
		} `json:"session"`
	}
	c.mustRest(b, http.MethodPost, "/sessions/"+sid+"/fork", map[string]any{"turnId": turnID, "clientSubmitId": "cf-fork"}, &forked, http.StatusCreated)
	if forked.Session.Title != "cluster (2)" {
		t.Fatalf("fork title %q", forked.Session.Title)
	}
	var again struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	c.mustRest(a, http.MethodPost, "/sessions/"+sid+"/fork", map[string]any{"turnId": turnID, "clientSubmitId": "cf-fork"}, &again, http.StatusCreated)
	if again.Session.ID != forked.Session.ID {
		t.Fatalf("the same fork id on the other replica gave another session")
	}

	var bad struct {
		Error struct {
			Code, Reason string
		} `json:"error"`
	}
	c.mustRest(b, http.MethodPatch, "/sessions/"+sid, map[string]any{"settings": map[string]string{"cwd": "/"}}, &bad, http.StatusBadRequest)
	if bad.Error.Reason != "cwd_outside_workspace_root" {
		t.Fatalf("outside the root: %+v", bad)
	}
	var upd struct {
		Session struct {
			Settings map[string]string `json:"settings"`
		} `json:"session"`
	}
	c.mustRest(b, http.MethodPatch, "/sessions/"+sid, map[string]any{"settings": map[string]string{"cwd": "proj"}}, &upd, http.StatusOK)
	if !strings.HasSuffix(upd.Session.Settings["cwd"], "/work/proj") {
		t.Fatalf("settings: %+v", upd.Session.Settings)
	}
	// The session keeps working with the new directory, on its owner.
	next := c.submit(b, sid, "cf-2", "/sim words=3")
	if tr := c.waitSettled(a, sid, next); tr.Outcome != "completed" {
		t.Fatalf("turn after the settings change: %+v", tr)
	}
	// And the fork runs too.
	ft := c.submit(b, forked.Session.ID, "cf-3", "/sim words=3")
	if tr := c.waitSettled(b, forked.Session.ID, ft); tr.Outcome != "completed" {
		t.Fatalf("turn in the fork: %+v", tr)
	}
}
