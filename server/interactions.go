package server

import (
	"context"

	"github.com/ensemble-dev/ensemble/host"
)

// interaction.respond: one member's answer to one exact interaction. The
// Host decides the winner; losing a race is a disposition, not an error.
type respondIn struct {
	wsField
	SessionID string                    `json:"sessionId"`
	TurnID    string                    `json:"turnId"`
	RequestID string                    `json:"requestId"`
	Response  *host.InteractionResponse `json:"response"`
}

func interactionRespond(ctx context.Context, s *Server, c caller, in respondIn) (any, error) {
	if in.Response == nil {
		return nil, errorf(host.CodeInvalidInput, "response is required")
	}
	return s.cfg.Host.RespondInteraction(ctx, host.RespondInput{
		Ref: host.InteractionRef{WorkspaceID: in.Workspace, SessionID: in.SessionID,
			TurnID: in.TurnID, RequestID: in.RequestID},
		Response: *in.Response, RespondedBy: c.p.UserID, RespondedByName: c.p.Name,
	})
}
