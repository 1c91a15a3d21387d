package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/conformance"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
)

// conformanceDriver runs the Host catalog on this store with the sim agent
// served in-process over ACP.
type conformanceDriver struct{}

func (conformanceDriver) OpenStore(t *testing.T) func(t *testing.T) host.Store {
	path := filepath.Join(t.TempDir(), "ensemble.db")
	return func(t *testing.T) host.Store {
		st, err := Open(context.Background(), path, Options{})
		if err != nil {
			t.Fatalf("open store: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
}

func (conformanceDriver) NewRuntime(t *testing.T) host.Runtime {
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true, Dial: sim.Dial(sim.Options{Rate: time.Millisecond})})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	return rt
}

func (conformanceDriver) CorruptTurn(t *testing.T, s host.Store, ref host.TurnRef) {
	st := s.(*Store)
	if _, err := st.w.ExecContext(t.Context(), `UPDATE turns SET phase = 'exploded'
		WHERE workspace_id = ? AND session_id = ? AND id = ?`, ref.WorkspaceID, ref.SessionID, ref.TurnID); err != nil {
		t.Fatalf("corrupt turn: %v", err)
	}
}

func (conformanceDriver) CorruptGoal(t *testing.T, s host.Store, ws, sessionID string) {
	st := s.(*Store)
	res, err := st.w.ExecContext(t.Context(), `UPDATE goals SET state_json = '{"goal": {"status": 7'
		WHERE workspace_id = ? AND session_id = ?`, ws, sessionID)
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("corrupt goal: %d rows, %v", n, err)
	}
}

func (conformanceDriver) CorruptGoalOperation(t *testing.T, s host.Store, ws, clientSubmitID string) {
	st := s.(*Store)
	res, err := st.w.ExecContext(t.Context(), `UPDATE goal_operations SET op_json = 'not json'
		WHERE workspace_id = ? AND client_submit_id = ?`, ws, clientSubmitID)
	if n, _ := res.RowsAffected(); err != nil || n != 1 {
		t.Fatalf("corrupt goal operation: %d rows, %v", n, err)
	}
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformanceDriver{})
}
