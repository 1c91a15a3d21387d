package server

import (
	"context"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

func interactionRespond(ctx context.Context, s *Server, c caller, in protocol.RespondInput) (any, error) {
	if in.Response == nil {
		return nil, errorf(host.CodeInvalidInput, "response is required")
	}
	return wire(protocol.FromRespondResult)(s.cfg.Host.RespondInteraction(ctx, host.RespondInput{
		Ref: host.InteractionRef{WorkspaceID: in.Workspace, SessionID: in.SessionID,
			TurnID: in.TurnID, RequestID: in.RequestID},
		Response: protocol.ToInteractionResponse(*in.Response), RespondedBy: c.p.UserID, RespondedByName: c.p.Name,
	}))
}
