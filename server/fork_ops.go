package server

import (
	"context"
	"net/http"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// Session fork, export and import (issue 14). Registered here so the
// shared op and route tables stay untouched but for one line each.

func init() {
	ops[protocol.OpSessionFork] = op(protocol.OpSessionFork, sessionFork)
	ops[protocol.OpSessionExport] = op(protocol.OpSessionExport, sessionExport)
	ops[protocol.OpSessionImport] = op(protocol.OpSessionImport, sessionImport)
	restTable = append(restTable,
		restRoute{http.MethodGet, "/sessions/{sessionId}/export", protocol.OpSessionExport, http.StatusOK},
		restRoute{http.MethodPost, "/imports", protocol.OpSessionImport, http.StatusOK})
}

func sessionFork(ctx context.Context, s *Server, c caller, in protocol.SessionForkInput) (any, error) {
	sess, err := s.cfg.Host.ForkSession(ctx, host.ForkSessionInput{WorkspaceID: in.Workspace,
		SessionID: in.SessionID, TurnID: in.TurnID, ClientSubmitID: in.ClientSubmitID,
		By: c.p.UserID, ByName: c.p.Name})
	if err != nil {
		return nil, err
	}
	return protocol.SessionResult{Session: protocol.FromSession(sess)}, nil
}

func sessionExport(ctx context.Context, s *Server, _ caller, in protocol.SessionRef) (any, error) {
	return s.cfg.Host.ExportSession(ctx, in.Workspace, in.SessionID)
}

func sessionImport(ctx context.Context, s *Server, c caller, in protocol.SessionImportInput) (any, error) {
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
	return wire(protocol.FromRestoreGraphResult)(res, err)
}
