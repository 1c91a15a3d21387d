package server

import (
	"context"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// Deleted-session lifecycle operations (issue 14): session.delete,
// session.listDeleted, session.restore and session.purge. Roles are in
// auth's one permission table: members delete and restore, admins purge.

// sessionIDs is the one-or-many session list of a delete or purge.
func sessionIDs(in protocol.SessionIDsInput) ([]string, error) {
	switch {
	case in.SessionID != "" && len(in.SessionIDs) > 0:
		return nil, errorf(host.CodeInvalidInput, "give sessionId or sessionIds, not both")
	case in.SessionID != "":
		return []string{in.SessionID}, nil
	case len(in.SessionIDs) == 0:
		return nil, errorf(host.CodeInvalidInput, "sessionId or sessionIds is required")
	case len(in.SessionIDs) > host.MaxDeleteBatch:
		return nil, errorf(host.CodeInvalidInput, "at most %d sessionIds", host.MaxDeleteBatch)
	}
	return in.SessionIDs, nil
}

func sessionDelete(ctx context.Context, s *Server, c caller, in protocol.SessionIDsInput) (any, error) {
	ids, err := sessionIDs(in)
	if err != nil {
		return nil, err
	}
	return wire(protocol.FromDeleteSessionsResult)(s.cfg.Host.DeleteSessions(ctx, host.DeleteSessionsInput{WorkspaceID: in.Workspace, SessionIDs: ids, By: c.p.UserID, ByName: c.p.Name}))
}

func sessionPurge(ctx context.Context, s *Server, _ caller, in protocol.SessionIDsInput) (any, error) {
	ids, err := sessionIDs(in)
	if err != nil {
		return nil, err
	}
	return wire(protocol.FromPurgeResult)(s.cfg.Host.PurgeDeletedSessionTrees(ctx, host.PurgeInput{WorkspaceID: in.Workspace, SessionIDs: ids}))
}

func sessionRestore(ctx context.Context, s *Server, _ caller, in protocol.SessionRef) (any, error) {
	return wire(protocol.FromRestoreResult)(s.cfg.Host.RestoreDeletedSession(ctx, host.RestoreInput{WorkspaceID: in.Workspace, SessionID: in.SessionID}))
}

func sessionListDeleted(ctx context.Context, s *Server, _ caller, in protocol.SessionListInput) (any, error) {
	if in.Limit < 0 {
		return nil, errorf(host.CodeInvalidInput, "limit must not be negative")
	}
	return wire(protocol.FromDeletedPage)(s.cfg.Host.ListDeletedSessions(ctx, in.Workspace, host.DeletedQuery{Cursor: in.Cursor, Limit: in.Limit}))
}
