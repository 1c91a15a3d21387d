package server

import (
	"context"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// goal.control and goal.get (issue 13). Members control a session's goal;
// viewers read it (auth role table).

func goalControl(ctx context.Context, s *Server, c caller, in protocol.GoalControlInput) (any, error) {
	return wire(protocol.FromGoalControlResult)(s.cfg.Host.GoalControl(ctx, host.GoalControlInput{
		WorkspaceID: in.Workspace, SessionID: in.SessionID, ClientSubmitID: in.ClientSubmitID,
		Action: in.Action, Goal: protocol.ToHost(in.Goal, protocol.ToGoalSpec), By: c.p.UserID, ByName: c.p.Name,
	}))
}

func goalGet(ctx context.Context, s *Server, _ caller, in protocol.SessionRef) (any, error) {
	st, err := s.cfg.Host.GetGoal(ctx, in.Workspace, in.SessionID)
	if err != nil {
		return nil, err
	}
	g := protocol.FromGoalState(st)
	return protocol.GoalGetResult{Goal: g.Goal, State: g}, nil
}
