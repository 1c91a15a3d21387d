package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFlagsFallBackToEnvironmentAndFlagWins(t *testing.T) {
	t.Setenv("ENSEMBLE_ADDR", "127.0.0.1:9999")
	t.Setenv("ENSEMBLE_SIM_RATE", "5ms")
	c, err := parseServe(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.addr != "127.0.0.1:9999" || c.simRate != 5*time.Millisecond {
		t.Fatalf("environment ignored: %+v", c)
	}
	c, err = parseServe([]string{"--addr", "127.0.0.1:7777"}, &bytes.Buffer{})
	if err != nil || c.addr != "127.0.0.1:7777" {
		t.Fatalf("the flag must win: %+v %v", c, err)
	}
}

func TestBadEnvironmentValueIsAnError(t *testing.T) {
	t.Setenv("ENSEMBLE_SIM_RATE", "fast")
	if _, err := parseServe(nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "ENSEMBLE_SIM_RATE") {
		t.Fatalf("want an error naming the variable, got %v", err)
	}
	if _, err := parseServe([]string{"--sim-rate", "1ms"}, &bytes.Buffer{}); err != nil {
		t.Fatalf("an explicit flag overrides a bad variable: %v", err)
	}
}

func TestServeHelpNamesEveryVariable(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseServe([]string{"--help"}, &out); err != errHelp {
		t.Fatalf("want errHelp, got %v", err)
	}
	for _, env := range []string{"ENSEMBLE_ADDR", "ENSEMBLE_DATA_DIR", "ENSEMBLE_DATABASE_URL", "ENSEMBLE_REDIS_URL",
		"ENSEMBLE_AGENT", "ENSEMBLE_REPLICA_ID", "ENSEMBLE_JWT_SECRET", "ENSEMBLE_JWT_ISSUER", "ENSEMBLE_JWT_AUDIENCE"} {
		if !strings.Contains(out.String(), env) {
			t.Errorf("--help does not mention %s", env)
		}
	}
}

func TestStoreSelection(t *testing.T) {
	if p, err := sqlitePath("", "/data"); err != nil || p != "/data/ensemble.db" {
		t.Fatalf("%q %v", p, err)
	}
	if _, err := sqlitePath("postgres://u:secret@db/x", "/data"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("a PostgreSQL URL is not a SQLite path, and its password is never echoed: %v", err)
	}
	if _, err := sqlitePath("mysql://u:secret@db/x", "/data"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Fatalf("an unknown URL is refused without echoing credentials: %v", err)
	}
}

// A missing agent binary is reported when serve starts, not at the first
// prompt (the agent process starts lazily).
func TestServeRefusesMissingAgent(t *testing.T) {
	var out, errOut bytes.Buffer
	missing := filepath.Join(t.TempDir(), "no-such-agent")
	err := serve(t.Context(), []string{"--data-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--agent", missing + " --flag"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("serve with a missing agent: %v", err)
	}
	if strings.Contains(out.String(), "listening") {
		t.Fatalf("serve started listening: %q", out.String())
	}
}
