package server

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

func TestHTTPOperations(t *testing.T) {
	e := newEnv(t, envOpts{})
	base := "/v1/workspaces/" + testWS

	var created protocol.CreateSessionResult
	if code := e.httpDo("POST", base+"/sessions", e.member, map[string]any{"title": "over http"}, &created); code != 201 {
		t.Fatalf("create: %d", code)
	}
	sid := created.Session.ID
	if created.Session.Title != "over http" || created.Session.WorkspaceID != testWS {
		t.Fatalf("created %+v", created.Session)
	}

	var got struct{ Session host.Session }
	if code := e.httpDo("GET", base+"/sessions/"+sid, e.viewer, nil, &got); code != 200 || got.Session.ID != sid {
		t.Fatalf("get: %d %+v", code, got)
	}
	var list protocol.SessionPage
	if code := e.httpDo("GET", base+"/sessions?limit=10", e.viewer, nil, &list); code != 200 || len(list.Sessions) != 1 {
		t.Fatalf("list: %d %+v", code, list)
	}
	if code := e.httpDo("PATCH", base+"/sessions/"+sid, e.member, map[string]any{"pinned": true}, &got); code != 200 || !got.Session.Pinned {
		t.Fatalf("patch: %d %+v", code, got)
	}

	var sr host.SendResult
	submit := map[string]any{"clientSubmitId": "http-1", "content": map[string]any{"text": "/sim words=8\nhi"}}
	if code := e.httpDo("POST", base+"/sessions/"+sid+"/messages", e.member, submit, &sr); code != 200 || sr.Turn == nil {
		t.Fatalf("submit: %d %+v", code, sr)
	}
	e.waitSettled(sid, sr.Turn.ID)
	var again host.SendResult
	if code := e.httpDo("POST", base+"/sessions/"+sid+"/messages", e.member, submit, &again); code != 200 || !again.Replayed || again.Turn.ID != sr.Turn.ID {
		t.Fatalf("retry: %d %+v", code, again)
	}

	var turns protocol.TurnPage
	if code := e.httpDo("GET", base+"/sessions/"+sid+"/turns", e.viewer, nil, &turns); code != 200 || len(turns.Turns) != 1 ||
		turns.Turns[0].Outcome != host.OutcomeCompleted {
		t.Fatalf("turns: %d %+v", code, turns)
	}
	var msgs protocol.MessagePage
	if code := e.httpDo("GET", base+"/sessions/"+sid+"/messages?afterVersion=0&limit=100", e.viewer, nil, &msgs); code != 200 || len(msgs.Messages) < 2 {
		t.Fatalf("messages: %d %+v", code, msgs)
	}
	var one protocol.MessagePage
	if code := e.httpDo("GET", base+"/sessions/"+sid+"/messages?afterVersion=1", e.viewer, nil, &one); code != 200 || len(one.Messages) != len(msgs.Messages)-1 {
		t.Fatalf("afterVersion: %d %d vs %d", code, len(one.Messages), len(msgs.Messages))
	}

	// A turn that never ends: busy, then cancel.
	var hang host.SendResult
	e.httpDo("POST", base+"/sessions/"+sid+"/messages", e.member,
		map[string]any{"clientSubmitId": "http-hang", "content": map[string]any{"text": "/sim hang\nwait"}}, &hang)
	var busy errBody
	if code := e.httpDo("POST", base+"/sessions/"+sid+"/messages", e.member,
		map[string]any{"clientSubmitId": "http-busy", "content": map[string]any{"text": "another"}}, &busy); code != 409 ||
		busy.Error.Code != protocol.CodeSessionBusy || !busy.Error.Retryable {
		t.Fatalf("busy: %d %+v", code, busy)
	}
	var cr host.CancelResult
	if code := e.httpDo("POST", base+"/sessions/"+sid+"/turns/"+hang.Turn.ID+"/cancel", e.member, map[string]any{"wait": 10000}, &cr); code != 200 ||
		!cr.IntentAccepted || !cr.Settled || cr.Turn.Outcome != host.OutcomeCanceled {
		t.Fatalf("cancel: %d %+v", code, cr)
	}

	cases := []struct {
		method, path, token string
		body                any
		status              int
		code                protocol.Code
	}{
		{"GET", base + "/sessions", "", nil, 401, protocol.CodeUnauthenticated},
		{"GET", base + "/sessions", "nope", nil, 401, protocol.CodeUnauthenticated},
		{"POST", base + "/sessions/" + sid + "/messages", e.viewer, map[string]any{"clientSubmitId": "v", "content": map[string]any{"text": "x"}}, 403, protocol.CodeForbidden},
		{"GET", "/v1/workspaces/w2/sessions", e.member, nil, 403, protocol.CodeForbidden},
		{"GET", base + "/sessions/ses_missing", e.member, nil, 404, protocol.CodeNotFound},
		{"POST", base + "/sessions", e.member, `{"title": 5}`, 400, protocol.CodeInvalidInput},
		{"POST", base + "/sessions", e.member, `{"bogus": true}`, 400, protocol.CodeInvalidInput},
		{"POST", base + "/sessions", e.member, `{not json`, 400, protocol.CodeInvalidInput},
		{"POST", base + "/sessions", e.member, map[string]any{"workspace": "w2"}, 400, protocol.CodeInvalidInput},
		{"GET", base + "/sessions?limit=ten", e.member, nil, 400, protocol.CodeInvalidInput},
		{"GET", base + "/sessions?colour=red", e.member, nil, 400, protocol.CodeInvalidInput},
		{"POST", base + "/sessions/" + sid + "/messages", e.member, map[string]any{"clientSubmitId": "http-1", "content": map[string]any{"text": "different"}}, 409, protocol.CodeOperationConflict},
		{"GET", base + "/sessions/" + sid + "/goal", e.viewer, nil, 200, ""},
		{"DELETE", base + "/sessions/" + sid, e.viewer, nil, 403, protocol.CodeForbidden},
		{"POST", base + "/sessions/" + sid + "/purge", e.member, nil, 403, protocol.CodeForbidden},
		{"POST", base + "/sessions/delete", e.member, map[string]any{"sessionIds": []string{}}, 400, protocol.CodeInvalidInput},
		{"DELETE", base + "/sessions/" + sid, e.member, nil, 200, ""},
		{"GET", base + "/sessions/" + sid, e.member, nil, 404, protocol.CodeNotFound},
		{"GET", "/v1/nowhere", e.member, nil, 404, protocol.CodeNotFound},
	}
	for _, c := range cases {
		var eb errBody
		code := e.httpDo(c.method, c.path, c.token, c.body, &eb)
		if code != c.status || eb.Error.Code != c.code || eb.Error.Retryable != c.code.Retryable() {
			t.Errorf("%s %s: %d %+v, want %d %s", c.method, c.path, code, eb.Error, c.status, c.code)
		}
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	e := newEnv(t, envOpts{})
	if code := e.httpDo("GET", "/healthz", "", nil, nil); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code := e.httpDo("GET", "/readyz", "", nil, nil); code != 200 {
		t.Fatalf("readyz %d", code)
	}
	cl := e.dial(e.member, false)
	createSession(t, cl)
	resp, err := http.Get(e.ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`ensemble_ws_connections 1`, `ensemble_requests_total{code="ok",op="session.create",transport="ws"} 1`,
		"ensemble_hub_rereads_total", "ensemble_hub_events_fanned_out_total", "go_goroutines"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestOpenAPICoversRoutes(t *testing.T) {
	e := newEnv(t, envOpts{})
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if code := e.httpDo("GET", "/v1/openapi.json", "", nil, &doc); code != 200 || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi: %d %q", code, doc.OpenAPI)
	}
	seen := 0
	for _, rt := range restTable {
		ops := doc.Paths["/v1/workspaces/{workspace}"+rt.path]
		raw, ok := ops[strings.ToLower(rt.method)]
		if !ok {
			t.Errorf("openapi lacks %s %s", rt.method, rt.path)
			continue
		}
		var o struct {
			OperationID string `json:"operationId"`
		}
		_ = json.Unmarshal(raw, &o)
		if o.OperationID != rt.op {
			t.Errorf("%s %s: operationId %q, want %q", rt.method, rt.path, o.OperationID, rt.op)
		}
		seen++
	}
	total := 0
	for _, m := range doc.Paths {
		total += len(m)
	}
	if total != seen {
		t.Errorf("openapi documents %d operations, the router serves %d", total, seen)
	}
}
