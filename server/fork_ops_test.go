package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// Fork, export and import over REST, end to end through the Host.
func TestForkExportImportOverHTTP(t *testing.T) {
	e := newEnv(t, envOpts{})
	admin := e.token("adam", auth.RoleAdmin, time.Hour)
	member := e.token("mia", auth.RoleMember, time.Hour)
	base := "/v1/workspaces/" + testWS
	var created protocol.CreateSessionResult
	if code := e.httpDo("POST", base+"/sessions", member, map[string]any{"title": "Notes",
		"clientSubmitId": "h-1", "content": map[string]any{"text": "/sim instant\nhello"}}, &created); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	sid := created.Session.ID
	e.waitSettled(sid, created.Turn.ID)

	var forked protocol.SessionResult
	if code := e.httpDo("POST", base+"/sessions/"+sid+"/fork", member, map[string]any{
		"turnId": created.Turn.ID, "clientSubmitId": "fork-h-1"}, &forked); code != http.StatusCreated || forked.Session.Title != "Notes (2)" {
		t.Fatalf("fork: %d %+v", code, forked.Session)
	}
	var again protocol.SessionResult
	if code := e.httpDo("POST", base+"/sessions/"+sid+"/fork", member, map[string]any{
		"turnId": created.Turn.ID, "clientSubmitId": "fork-h-1"}, &again); code != http.StatusCreated || again.Session.ID != forked.Session.ID {
		t.Fatalf("fork replay: %d %+v", code, again.Session)
	}
	var eb errBody
	if code := e.httpDo("POST", base+"/sessions/"+sid+"/fork", member, map[string]any{
		"turnId": "turn_missing", "clientSubmitId": "fork-h-2"}, &eb); code != http.StatusNotFound {
		t.Fatalf("fork of a missing turn: %d %+v", code, eb)
	}

	// Export needs an admin; the graph round-trips through another workspace.
	if code := e.httpDo("GET", base+"/sessions/"+sid+"/export", member, nil, &eb); code != http.StatusForbidden {
		t.Fatalf("member export: %d", code)
	}
	var graph json.RawMessage
	if code := e.httpDo("GET", base+"/sessions/"+sid+"/export", admin, nil, &graph); code != http.StatusOK {
		t.Fatalf("export: %d %s", code, graph)
	}
	tok2, err := auth.Mint(testSecret, auth.Claims{Sub: "adam", Name: "Adam", Workspaces: map[string]auth.Role{"w2": auth.RoleAdmin}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var res protocol.RestoreGraphResult
	if code := e.httpDo("POST", "/v1/workspaces/w2/imports", tok2, map[string]any{"user": "carol", "graph": graph}, &res); code != http.StatusOK || !res.Created || len(res.Sessions) != 1 {
		t.Fatalf("import: %d %+v", code, res)
	}
	if code := e.httpDo("POST", "/v1/workspaces/w2/imports", tok2, map[string]any{"user": "carol", "graph": graph}, &res); code != http.StatusOK || res.Created {
		t.Fatalf("identical import again: %d %+v", code, res)
	}
	if code := e.httpDo("POST", "/v1/workspaces/w2/imports", tok2, map[string]any{"user": "dave", "graph": graph}, &eb); code != http.StatusConflict || eb.Error.Reason != host.ReasonImportConflict {
		t.Fatalf("import for another owner: %d %+v", code, eb)
	}
	var graph2 json.RawMessage
	if code := e.httpDo("GET", "/v1/workspaces/w2/sessions/"+sid+"/export", tok2, nil, &graph2); code != http.StatusOK {
		t.Fatalf("export the import: %d", code)
	}
	if !bytes.Equal(graph, graph2) {
		t.Fatalf("export after import differs:\n%s\n%s", graph, graph2)
	}
	s, err := e.host.GetSession(t.Context(), "w2", sid)
	if err != nil || s.CreatedBy != "carol" {
		t.Fatalf("imported owner: %+v %v", s, err)
	}
}

// Settings through the server: outside the root is invalid_input and
// changes nothing; inside is saved resolved.
func TestSessionSettingsOutsideRootOverHTTP(t *testing.T) {
	root, err := host.ResolveWorkspaceRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "proj"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOpts{workspaceRoot: root})
	member := e.token("mia", auth.RoleMember, time.Hour)
	viewer := e.token("vic", auth.RoleViewer, time.Hour)
	base := "/v1/workspaces/" + testWS + "/sessions"
	var eb errBody
	if code := e.httpDo("POST", base, member, map[string]any{"settings": map[string]string{"cwd": "/etc"}}, &eb); code != http.StatusBadRequest || eb.Error.Reason != host.ReasonCwdOutsideRoot {
		t.Fatalf("create outside the root: %d %+v", code, eb)
	}
	var created protocol.CreateSessionResult
	if code := e.httpDo("POST", base, member, map[string]any{}, &created); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	path := base + "/" + created.Session.ID
	for _, cwd := range []string{"/etc", "..", "proj/../.."} {
		if code := e.httpDo("PATCH", path, member, map[string]any{"settings": map[string]string{"cwd": cwd}}, &eb); code != http.StatusBadRequest || eb.Error.Code != protocol.CodeInvalidInput || eb.Error.Reason != host.ReasonCwdOutsideRoot {
			t.Fatalf("cwd %q: %d %+v", cwd, code, eb)
		}
	}
	if code := e.httpDo("PATCH", path, viewer, map[string]any{"settings": map[string]string{"cwd": "proj"}}, &eb); code != http.StatusForbidden {
		t.Fatalf("viewer settings: %d", code)
	}
	var got protocol.SessionResult
	if code := e.httpDo("PATCH", path, member, map[string]any{"settings": map[string]string{"cwd": "proj"}, "pinned": true}, &got); code != http.StatusOK ||
		got.Session.Settings["cwd"] != filepath.Join(root, "proj") || !got.Session.Pinned {
		t.Fatalf("valid settings: %d %+v", code, got.Session)
	}
}

// unimplementedMemberOp is a documented operation a member may run that
// this server does not implement yet ("" once every one is implemented),
// for the check that such operations answer unsupported.
func unimplementedMemberOp() string {
	names := auth.Operations()
	slices.Sort(names)
	for _, op := range names {
		if _, ok := ops[op]; !ok && auth.Allowed(auth.RoleMember, op) {
			return op
		}
	}
	return ""
}
