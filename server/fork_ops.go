package server

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/ensemble-dev/ensemble/host"
)

// Session fork, export and import (issue 14). Registered here so the
// shared op and route tables stay untouched but for one line each.

func init() {
	ops["session.fork"] = op("session.fork", sessionFork)
	ops["session.export"] = op("session.export", sessionExport)
	ops["session.import"] = op("session.import", sessionImport)
	restTable = append(restTable,
		restRoute{http.MethodGet, "/sessions/{sessionId}/export", "session.export", http.StatusOK},
		restRoute{http.MethodPost, "/imports", "session.import", http.StatusOK})
}

type sessionForkIn struct {
	wsField
	SessionID      string `json:"sessionId"`
	TurnID         string `json:"turnId"`
	ClientSubmitID string `json:"clientSubmitId"`
}

func sessionFork(ctx context.Context, s *Server, c caller, in sessionForkIn) (any, error) {
	sess, err := s.cfg.Host.ForkSession(ctx, host.ForkSessionInput{WorkspaceID: in.Workspace,
		SessionID: in.SessionID, TurnID: in.TurnID, ClientSubmitID: in.ClientSubmitID,
		By: c.p.UserID, ByName: c.p.Name})
	if err != nil {
		return nil, err
	}
	return sessionResult{Session: sess}, nil
}

func sessionExport(ctx context.Context, s *Server, _ caller, in sessionRef) (any, error) {
	return s.cfg.Host.ExportSession(ctx, in.Workspace, in.SessionID)
}

type sessionImportIn struct {
	wsField
	// User owns the imported sessions; default: the caller.
	User  string          `json:"user"`
	Graph json.RawMessage `json:"graph"`
}

func sessionImport(ctx context.Context, s *Server, c caller, in sessionImportIn) (any, error) {
	g, err := host.DecodeGraph(in.Graph)
	if err != nil {
		return nil, err
	}
	user := in.User
	if user == "" {
		user = c.p.UserID
	}
	res, err := s.cfg.Host.ImportSessionGraph(ctx, in.Workspace, user, g)
	if res.Sessions == nil {
		res.Sessions = []string{}
	}
	return res, err
}
