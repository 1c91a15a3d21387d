package server

import (
	"context"

	"github.com/ensemble-dev/ensemble/host"
)

// goal.control and goal.get (issue 13). Members control a session's goal;
// viewers read it (auth role table).

type goalControlIn struct {
	wsField
	SessionID      string         `json:"sessionId"`
	ClientSubmitID string         `json:"clientSubmitId"`
	Action         string         `json:"action"`
	Goal           *host.GoalSpec `json:"goal"`
}

func goalControl(ctx context.Context, s *Server, c caller, in goalControlIn) (any, error) {
	return s.cfg.Host.GoalControl(ctx, host.GoalControlInput{
		WorkspaceID: in.Workspace, SessionID: in.SessionID, ClientSubmitID: in.ClientSubmitID,
		Action: in.Action, Goal: in.Goal, By: c.p.UserID, ByName: c.p.Name,
	})
}

// goalGetResult: goal is absent when the session has none (or it was
// cleared); state is the whole canonical goal record.
type goalGetResult struct {
	Goal  *host.Goal     `json:"goal,omitempty"`
	State host.GoalState `json:"state"`
}

func goalGet(ctx context.Context, s *Server, _ caller, in sessionRef) (any, error) {
	st, err := s.cfg.Host.GetGoal(ctx, in.Workspace, in.SessionID)
	if err != nil {
		return nil, err
	}
	return goalGetResult{Goal: st.Goal, State: st}, nil
}
