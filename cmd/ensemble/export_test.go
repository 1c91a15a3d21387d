package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
	"github.com/ensemble-dev/ensemble/sqlite"
)

// seedSettledSession writes one session with two settled turns into the
// embedded store of dataDir, through a real Host and the sim agent.
func seedSettledSession(t *testing.T, dataDir, ws string) string {
	t.Helper()
	ctx := context.Background()
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(dataDir, "ensemble.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true, Dial: sim.Dial(sim.Options{Rate: -1})})
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = rt.Shutdown(sctx)
	}()
	h := host.New(host.Config{Store: st, Runtime: rt})
	if _, err := h.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := h.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, Title: "Exported", CreatedBy: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	for i, text := range []string{"first", "second"} {
		res, err := h.SendInput(ctx, host.SendInput{WorkspaceID: ws, SessionID: r.Session.ID,
			ClientSubmitID: "c" + string(rune('0'+i)), Content: host.MessageContent{Text: text}})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			tr, err := h.GetTurn(ctx, ws, r.Session.ID, res.Turn.ID)
			if err == nil && tr.Settled() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("turn never settled: %+v %v", tr, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	h.FlushPublish()
	return r.Session.ID
}

func runCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestExportImportCommands: export → import into a fresh installation's
// workspace → export again is byte-identical; importing again is a no-op;
// conflicting content is refused; nothing needs an agent.
func TestExportImportCommands(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	sid := seedSettledSession(t, src, "w1")

	first := filepath.Join(dir, "first.json")
	if _, errOut, code := runCmd(t, "export", "--data-dir", src, "--workspace", "w1", "--session", sid, "--out", first); code != 0 {
		t.Fatalf("export: %s", errOut)
	}
	stdoutCopy, errOut, code := runCmd(t, "export", "--data-dir", src, "--workspace", "w1", "--session", sid)
	a, _ := os.ReadFile(first)
	if code != 0 || stdoutCopy != string(a) || !strings.Contains(string(a), `"format": "ensemble.session-graph"`) {
		t.Fatalf("export to stdout differs from the file (%s)", errOut)
	}

	out, errOut, code := runCmd(t, "import", "--data-dir", dst, "--workspace", "fresh", "--user", "carol", "--in", first)
	if code != 0 || !strings.HasPrefix(out, "imported: 1 sessions") {
		t.Fatalf("import: %q %s", out, errOut)
	}
	second := filepath.Join(dir, "second.json")
	if _, errOut, code := runCmd(t, "export", "--data-dir", dst, "--workspace", "fresh", "--session", sid, "--out", second); code != 0 {
		t.Fatalf("export the import: %s", errOut)
	}
	b, _ := os.ReadFile(second)
	if !bytes.Equal(a, b) {
		t.Fatalf("export after import differs:\n%s\n---\n%s", a, b)
	}
	out, errOut, code = runCmd(t, "import", "--data-dir", dst, "--workspace", "fresh", "--user", "carol", "--in", first)
	if code != 0 || !strings.HasPrefix(out, "already present") {
		t.Fatalf("re-import: %q %s", out, errOut)
	}
	changed := filepath.Join(dir, "changed.json")
	if err := os.WriteFile(changed, bytes.Replace(a, []byte(`"title": "Exported"`), []byte(`"title": "Tampered"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := runCmd(t, "import", "--data-dir", dst, "--workspace", "fresh", "--user", "carol", "--in", changed); code == 0 || !strings.Contains(errOut, "already holds different content") {
		t.Fatalf("conflicting import: code %d %s", code, errOut)
	}
	if _, errOut, code := runCmd(t, "import", "--data-dir", dst, "--workspace", "fresh", "--in", first); code == 0 || !strings.Contains(errOut, "--user is required") {
		t.Fatalf("import without --user: %d %s", code, errOut)
	}
	if _, errOut, code := runCmd(t, "export", "--data-dir", src, "--workspace", "other", "--session", sid); code == 0 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("export from another workspace: %d %s", code, errOut)
	}
}
