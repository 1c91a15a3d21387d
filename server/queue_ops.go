package server

import (
	"context"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// The session message queue's operations (issue 12): queue.get,
// queue.retract and turn.interrupt. turn.message.submit (ops.go) is the one
// admission path that creates entries.

func init() {
	ops[protocol.OpQueueGet] = op(protocol.OpQueueGet, queueGet)
	ops[protocol.OpQueueRetract] = op(protocol.OpQueueRetract, queueRetract)
	ops[protocol.OpTurnInterrupt] = op(protocol.OpTurnInterrupt, turnInterrupt)
}

func queueGet(ctx context.Context, s *Server, _ caller, in protocol.SessionRef) (any, error) {
	q, err := s.cfg.Host.Queue(ctx, in.Workspace, in.SessionID)
	if err != nil {
		return nil, err
	}
	return protocol.QueueResult{Queue: protocol.FromQueue(q)}, nil
}

// queueRetract: any member retracts their own entry; an admin any entry.
func queueRetract(ctx context.Context, s *Server, c caller, in protocol.RetractInput) (any, error) {
	role, _ := c.p.RoleIn(in.Workspace)
	return wire(protocol.FromRetractResult)(s.cfg.Host.RetractQueued(ctx, host.RetractInput{
		WorkspaceID: in.Workspace, SessionID: in.SessionID, EntryID: in.EntryID,
		By: c.p.UserID, Admin: role >= auth.RoleAdmin,
	}))
}

// defaultInterruptWait is how long turn.interrupt waits for the terminal.
const defaultInterruptWait = 10 * time.Second

func turnInterrupt(ctx context.Context, s *Server, c caller, in protocol.CancelInput) (any, error) {
	wait := defaultInterruptWait
	if in.Wait != nil {
		if *in.Wait <= 0 || *in.Wait > host.MaxCancelWait.Milliseconds() {
			return nil, errorf(host.CodeInvalidInput, "wait must be between 1 and %d ms", host.MaxCancelWait.Milliseconds())
		}
		wait = time.Duration(*in.Wait) * time.Millisecond
	}
	return wire(protocol.FromInterruptResult)(s.cfg.Host.InterruptTurn(ctx, host.InterruptInput{
		WorkspaceID: in.Workspace, SessionID: in.SessionID, TurnID: in.TurnID, Wait: wait,
		By: c.p.UserID, ByName: c.p.Name,
	}))
}
