package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gorilla/mux"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// Fuzz targets for everything the server decodes from a client: the frame
// decoder, every operation's input decoder (with the limits checks and the
// authorization step in front of the Host), and the HTTP input assembly.
// Seed corpora are in testdata/fuzz/<target>/; `go test` runs them as unit
// tests and .ci/run fuzzes each target briefly.

func mustInvalidInput(t *testing.T, err error) {
	t.Helper()
	var he *host.Error
	if !errors.As(err, &he) || he.Code != host.CodeInvalidInput {
		t.Fatalf("want invalid_input, got %v", err)
	}
	if !utf8.ValidString(he.Message) || len(he.Message) > 512 {
		t.Fatalf("bad message %q", he.Message)
	}
}

// FuzzFrame: the WebSocket frame decoder never panics; a refused frame is
// invalid_input with an echoable id (null or a short JSON value); an
// accepted one has a known type and, for requests, a string id of at most
// 128 characters.
func FuzzFrame(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, id, err := parseFrame(data)
		if len(id) == 0 || len(id) > maxIDBytes || !json.Valid(id) {
			t.Fatalf("echo id %q", id)
		}
		if err != nil {
			mustInvalidInput(t, err)
			return
		}
		switch fr.Type {
		case "request":
			var s string
			if json.Unmarshal(id, &s) != nil || len(id) > maxIDBytes || fr.Token != "" {
				t.Fatalf("accepted request id %q", id)
			}
		case "hello", "ping", "pong":
			if string(id) != "null" || fr.Op != "" || len(fr.Input) > 0 {
				t.Fatalf("accepted %s with id/op/input", fr.Type)
			}
		default:
			t.Fatalf("accepted type %q", fr.Type)
		}
	})
}

// fuzzOps is every operation the protocol defines, plus auth.refresh.
func fuzzOps() []string {
	names := append(auth.Operations(), protocol.OpAuthRefresh)
	slices.Sort(names)
	return names
}

// FuzzOperationInput picks an operation by sel and decodes input as its
// input. A refused input is invalid_input; an accepted one re-encodes to
// something that decodes to the same value, and the limits check either
// refuses it as invalid_input or leaves content within MaxPromptBytes.
// The whole dispatch, for a caller who is a member elsewhere, answers
// invalid_input or forbidden and never reaches the Host (which is nil
// here: reaching it would panic).
func FuzzOperationInput(f *testing.F) {
	names := fuzzOps()
	s := &Server{limits: DefaultLimits()}
	outsider := caller{p: auth.Principal{UserID: "fuzz", Workspaces: map[string]auth.Role{"elsewhere": auth.RoleAdmin}}}
	f.Fuzz(func(t *testing.T, sel uint8, input []byte) {
		name := names[int(sel)%len(names)]
		if name == protocol.OpAuthRefresh {
			var in protocol.RefreshInput
			if err := decodeStrict(input, &in); err != nil {
				mustInvalidInput(t, err)
			}
			return
		}
		if fn, ok := ops[name]; ok {
			in, err := fn.decode(input)
			if err != nil {
				mustInvalidInput(t, err)
			} else {
				checkRoundTrip(t, fn, in)
				if err := checkLimits(in, s.limits); err != nil {
					mustInvalidInput(t, err)
				} else if c := contentOf(in); c != nil && contentSize(*c) > s.limits.MaxPromptBytes {
					t.Fatalf("content of %d bytes passed", contentSize(*c))
				}
			}
		}
		res, err := s.dispatch(context.Background(), outsider, name, input)
		var he *host.Error
		if res != nil || !errors.As(err, &he) || (he.Code != host.CodeInvalidInput && he.Code != host.CodeForbidden) {
			t.Fatalf("%s as an outsider: %v %v", name, res, err)
		}
	})
}

func checkRoundTrip(t *testing.T, fn opFunc, in input) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatalf("re-encode %T: %v", in, err)
	}
	again, err := fn.decode(b)
	if err != nil {
		t.Fatalf("re-encoded %s does not decode: %v", b, err)
	}
	b2, _ := json.Marshal(again)
	if !bytes.Equal(b, b2) {
		t.Fatalf("round trip differs:\n%s\n%s", b, b2)
	}
}

func contentOf(in input) *host.MessageContent {
	switch v := in.(type) {
	case protocol.SessionCreateInput:
		return protocol.ToHost(v.Content, protocol.ToMessageContent)
	case protocol.SubmitInput:
		return new(protocol.ToMessageContent(v.Content))
	}
	return nil
}

var fuzzMethods = []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete, http.MethodHead}

// FuzzRESTInput assembles an HTTP operation input from a route's path
// variables (one of them fuzzed), a query and a body. A refused request is
// invalid_input; an accepted one is a JSON object in which every path
// variable has the path's value, and once decoded as the route's
// operation input the workspace and ids are still the path's.
func FuzzRESTInput(f *testing.F) {
	f.Fuzz(func(t *testing.T, route, method uint8, pathVar, query string, body []byte) {
		rt := restTable[int(route)%len(restTable)]
		m := fuzzMethods[int(method)%len(fuzzMethods)]
		vars := map[string]string{"workspace": "w1"}
		for _, k := range []string{"sessionId", "turnId", "requestId"} {
			if strings.Contains(rt.path, "{"+k+"}") {
				vars[k] = "id-" + k
			}
		}
		if _, ok := vars["sessionId"]; ok {
			vars["sessionId"] = pathVar
		} else {
			vars["workspace"] = pathVar
		}
		r := &http.Request{Method: m, URL: &url.URL{Path: "/v1/x", RawQuery: query}, Header: http.Header{},
			Body: io.NopCloser(bytes.NewReader(body))}
		r = mux.SetURLVars(r, vars)
		raw, err := restInput(r, 4096)
		if err != nil {
			mustInvalidInput(t, err)
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Fatalf("assembled input is not an object: %s", raw)
		}
		want := map[string]string{}
		for k, v := range vars {
			u, err := url.PathUnescape(v)
			if err != nil {
				t.Fatalf("%s %q accepted though badly escaped", k, v)
			}
			enc, _ := json.Marshal(u)
			var exp, got string
			_ = json.Unmarshal(enc, &exp)
			if json.Unmarshal(obj[k], &got) != nil || got != exp {
				t.Fatalf("%s: %s, path has %q", k, obj[k], u)
			}
			want[k] = got
		}
		fn, ok := ops[rt.op]
		if !ok {
			return
		}
		in, err := fn.decode(raw)
		if err != nil {
			mustInvalidInput(t, err)
			return
		}
		dec, _ := json.Marshal(in)
		var back map[string]any
		_ = json.Unmarshal(dec, &back)
		for k, v := range want {
			if back[k] != v {
				t.Fatalf("%s decoded as %v, path has %q (input %s)", k, back[k], v, raw)
			}
		}
	})
}
