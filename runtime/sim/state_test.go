package sim_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/ensemble-dev/ensemble/runtime/sim"
)

func load(s *served, t *testing.T, sid acp.SessionId) error {
	_, err := s.conn.LoadSession(context.Background(), acp.LoadSessionRequest{SessionId: sid, Cwd: t.TempDir(), McpServers: []acp.McpServer{}})
	return err
}

func resourceNotFound(t *testing.T, err error) {
	t.Helper()
	var re *acp.RequestError
	if err == nil || !errors.As(err, &re) || re.Code != -32002 || re.Message != "Resource not found" {
		t.Fatalf("load of an unknown session: %v, want Resource not found", err)
	}
}

// With a state directory the sim keeps its sessions on disk, as real ACP
// agents do: a new agent (a restarted process) on the same directory loads
// a session and replays its history, and still fails for an unknown id.
func TestStateDirSessionsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	ctx1, stop1 := context.WithCancel(context.Background())
	first := serve(t, ctx1, sim.Options{Rate: -1, StateDir: dir}, &client{})
	sid := first.newSession(t)
	if _, err := first.prompt(sid, "first question"); err != nil {
		t.Fatal(err)
	}
	if _, err := first.prompt(sid, "/sim words=7"); err != nil {
		t.Fatal(err)
	}
	answers, _ := agentText(first.client.take())
	stop1() // the agent process ends; only the directory remains

	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 || filepath.Base(files[0]) != string(sid)+".json" {
		t.Fatalf("state dir holds %v, want one file for %s", files, sid)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	var label struct {
		Simulated bool   `json:"simulated"`
		Agent     string `json:"agent"`
	}
	if err := json.Unmarshal(data, &label); err != nil || !label.Simulated || !strings.Contains(label.Agent, "simulated") {
		t.Fatalf("the state file must say it is the simulator's: %s", data)
	}

	second := serve(t, context.Background(), sim.Options{Rate: -1, StateDir: dir}, &client{})
	resourceNotFound(t, load(second, t, "sim-0123456789abcdef"))
	if err := load(second, t, sid); err != nil {
		t.Fatalf("load after restart: %v", err)
	}
	us := second.client.take()
	if len(us) != 4 || us[0].UserMessageChunk == nil || us[0].UserMessageChunk.Content.Text.Text != "first question" ||
		us[2].UserMessageChunk == nil || us[2].UserMessageChunk.Content.Text.Text != "/sim words=7" {
		t.Fatalf("replay after restart = %+v", us)
	}
	if replayed, _ := agentText(us); replayed != answers {
		t.Errorf("replayed answers %q, want %q", replayed, answers)
	}
	// The loaded session goes on, and is not greeted as a new one.
	if _, err := second.prompt(sid, "again"); err != nil {
		t.Fatalf("prompt after load: %v", err)
	}
	if text, _ := agentText(second.client.take()); strings.HasPrefix(text, "Hello!") {
		t.Errorf("the loaded session was answered as a first prompt: %q", text)
	}

	// Without a state directory the sim forgets, as before.
	mem := serve(t, context.Background(), sim.Options{Rate: -1}, &client{})
	resourceNotFound(t, load(mem, t, sid))
}

// A session id is only used in a file name when it is one the sim could
// have issued: a hostile id cannot read (or write) outside the directory.
func TestStateDirRejectsHostileSessionIDs(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A session file planted outside the state directory, naming itself
	// by the traversing id that would reach it.
	hostile := []string{
		"../sim-0123456789abcdef",
		"sim-0123456789abcdef/../../sim-0123456789abcdef",
		filepath.Join(root, "sim-0123456789abcdef"),
		"..", "", "sim-", "sim-0123456789ABCDEF", "sim-0123456789abcdef0", "sim-0123456789abcde\x00",
	}
	for _, id := range hostile {
		plant, _ := json.Marshal(map[string]any{"sessionId": id, "simulated": true,
			"history": []map[string]string{{"user": "planted", "agent": "planted"}}})
		if err := os.WriteFile(filepath.Join(root, "sim-0123456789abcdef.json"), plant, 0o600); err != nil {
			t.Fatal(err)
		}
		s := serve(t, context.Background(), sim.Options{Rate: -1, StateDir: dir}, &client{})
		resourceNotFound(t, load(s, t, acp.SessionId(id)))
		if us := s.client.take(); len(us) != 0 {
			t.Fatalf("id %q replayed a file outside the state dir: %+v", id, us)
		}
		if _, err := s.prompt(acp.SessionId(id), "hello"); err == nil {
			t.Fatalf("prompt in hostile session %q succeeded", id)
		}
	}
	entries, _ := os.ReadDir(root)
	for _, e := range entries {
		if e.Name() != "state" && e.Name() != "sim-0123456789abcdef.json" {
			t.Errorf("a file was written outside the state dir: %s", e.Name())
		}
	}
}
