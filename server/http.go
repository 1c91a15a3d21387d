package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/gorilla/mux"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// restRoute maps one HTTP route onto an operation.
type restRoute struct {
	method, path, op string
	okStatus         int
}

// restTable is every REST route; openapi.json documents the same list.
var restTable = []restRoute{
	{http.MethodPost, "/sessions", protocol.OpSessionCreate, http.StatusCreated},
	{http.MethodGet, "/sessions", protocol.OpSessionList, http.StatusOK},
	{http.MethodGet, "/sessions/{sessionId}", protocol.OpSessionGet, http.StatusOK},
	{http.MethodPatch, "/sessions/{sessionId}", protocol.OpSessionUpdate, http.StatusOK},
	{http.MethodDelete, "/sessions/{sessionId}", protocol.OpSessionDelete, http.StatusOK},
	{http.MethodPost, "/sessions/{sessionId}/restore", protocol.OpSessionRestore, http.StatusOK},
	{http.MethodPost, "/sessions/{sessionId}/purge", protocol.OpSessionPurge, http.StatusOK},
	{http.MethodPost, "/sessions/delete", protocol.OpSessionDelete, http.StatusOK},
	{http.MethodGet, "/trash", protocol.OpSessionListDeleted, http.StatusOK},
	{http.MethodPost, "/trash/purge", protocol.OpSessionPurge, http.StatusOK},
	{http.MethodPost, "/sessions/{sessionId}/fork", protocol.OpSessionFork, http.StatusCreated},
	{http.MethodPost, "/sessions/{sessionId}/continue-fresh", protocol.OpSessionContinueFresh, http.StatusOK},
	{http.MethodPost, "/sessions/{sessionId}/messages", protocol.OpTurnSubmit, http.StatusOK},
	{http.MethodGet, "/sessions/{sessionId}/messages", protocol.OpMessageList, http.StatusOK},
	{http.MethodGet, "/sessions/{sessionId}/queue", protocol.OpQueueGet, http.StatusOK},
	{http.MethodPost, "/sessions/{sessionId}/queue/retract", protocol.OpQueueRetract, http.StatusOK},
	{http.MethodGet, "/sessions/{sessionId}/turns", protocol.OpTurnList, http.StatusOK},
	{http.MethodPost, "/sessions/{sessionId}/turns/{turnId}/cancel", protocol.OpTurnCancel, http.StatusOK},
	{http.MethodPost, "/sessions/{sessionId}/turns/{turnId}/interrupt", protocol.OpTurnInterrupt, http.StatusOK},
	{http.MethodPost, "/sessions/{sessionId}/turns/{turnId}/interactions/{requestId}/respond", protocol.OpInteractionRespond, http.StatusOK},
	{http.MethodGet, "/sessions/{sessionId}/goal", protocol.OpGoalGet, http.StatusOK},
	{http.MethodPost, "/sessions/{sessionId}/goal", protocol.OpGoalControl, http.StatusOK},
}

// numericQuery are the query parameters that are numbers in the input.
var numericQuery = map[string]bool{"limit": true, "before": true, "afterVersion": true, "beforeVersion": true}

func (s *Server) restRoutes(r *mux.Router) {
	for _, rt := range restTable {
		r.HandleFunc(rt.path, s.rest(rt.op, rt.okStatus)).Methods(rt.method)
	}
}

// rest serves one operation over HTTP: Bearer auth, the input assembled
// from path, query and body, the same dispatch as the WebSocket.
func (s *Server) rest(op string, okStatus int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		tok, _ := bearerToken(r)
		var p auth.Principal
		err := errNoToken
		if tok != "" {
			p, _, err = s.cfg.Verifier.Verify(tok)
		}
		if err != nil {
			s.authFailed("http", r.RemoteAddr, err)
			w.Header().Set("WWW-Authenticate", "Bearer")
			s.metrics.request("http", op, string(host.CodeUnauthenticated))
			writeHTTPError(w, http.StatusUnauthorized, unauthenticated(err))
			return
		}
		if !s.httpLimiters.allow(p.UserID) {
			s.metrics.limit("http_rate")
			s.metrics.request("http", op, string(host.CodeRateLimited))
			retryAfter(w)
			writeHTTPError(w, http.StatusTooManyRequests, protocol.Error{Code: protocol.CodeRateLimited, Retryable: true,
				Reason: "request_rate", Message: "too many requests from this user; slow down"})
			return
		}
		raw, err := restInput(r, s.limits.MaxBodyBytes)
		var res any
		if err == nil {
			res, err = s.dispatch(r.Context(), caller{p: p}, op, raw)
		}
		if err != nil {
			we := toWire(err, s.log, op)
			s.metrics.request("http", op, string(we.Code))
			writeHTTPError(w, we.Code.HTTPStatus(), we)
			return
		}
		s.metrics.request("http", op, "ok")
		writeJSON(w, okStatus, res)
	}
}

// restInput merges the JSON body, the path variables and (for GET) the
// query into one operation input. A body field that contradicts the path
// is invalid input.
func restInput(r *http.Request, maxBody int64) (json.RawMessage, error) {
	in := map[string]json.RawMessage{}
	if r.Body != nil && r.Method != http.MethodGet && r.Method != http.MethodHead {
		body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &host.Error{Code: host.CodeInvalidInput, Reason: "body_too_large",
				Message: "body exceeds " + strconv.FormatInt(maxBody, 10) + " bytes"}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &host.Error{Code: host.CodeInvalidInput, Reason: "body_timeout",
				Message: "the body did not arrive within the read timeout"}
		}
		if err != nil {
			return nil, errorf(host.CodeInvalidInput, "could not read the body")
		}
		if len(bytes.TrimSpace(body)) > 0 {
			if err := decodeStrict(body, &in); err != nil {
				return nil, errorf(host.CodeInvalidInput, "body must be a JSON object")
			}
		}
	}
	q := r.URL.Query()
	if len(q) > 0 && r.Method != http.MethodGet && r.Method != http.MethodHead {
		return nil, errorf(host.CodeInvalidInput, "query parameters are only read on GET; send a JSON body")
	}
	for k, vs := range q {
		if len(vs) != 1 {
			return nil, errorf(host.CodeInvalidInput, "query parameter %s given more than once", paramName(k))
		}
		if numericQuery[k] {
			n, err := strconv.ParseInt(vs[0], 10, 64)
			if err != nil {
				return nil, errorf(host.CodeInvalidInput, "query parameter %s must be an integer", paramName(k))
			}
			in[k] = json.RawMessage(strconv.FormatInt(n, 10))
			continue
		}
		b, _ := json.Marshal(vs[0])
		in[k] = b
	}
	for k, v := range mux.Vars(r) {
		val, err := url.PathUnescape(v)
		if err != nil {
			return nil, errorf(host.CodeInvalidInput, "path parameter %s is badly escaped", k)
		}
		b, _ := json.Marshal(val)
		if prev, ok := in[k]; ok && !bytes.Equal(bytes.TrimSpace(prev), b) {
			return nil, errorf(host.CodeInvalidInput, "%s in the body differs from the path", k)
		}
		in[k] = b
	}
	return json.Marshal(in)
}

// paramName is a client-chosen name made safe to echo: valid UTF-8,
// bounded.
func paramName(k string) string { return truncate(strings.ToValidUTF8(k, "?"), 64) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error","retryable":false}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeHTTPError(w http.ResponseWriter, status int, we protocol.Error) {
	writeJSON(w, status, struct {
		Error protocol.Error `json:"error"`
	}{we})
}
