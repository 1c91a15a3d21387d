package pg

import (
	"context"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/conformance"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
)

// conformanceDriver runs the Host catalog on PostgreSQL, one fresh schema
// per scenario, with the sim agent served in-process over ACP.
type conformanceDriver struct{}

func (conformanceDriver) OpenStore(t *testing.T) func(t *testing.T) host.Store {
	url, _ := testSchema(t)
	return func(t *testing.T) host.Store { return openTest(t, url, Options{}) }
}

func (conformanceDriver) NewRuntime(t *testing.T) host.Runtime {
	return newSimRuntime(t, time.Millisecond)
}

func (conformanceDriver) CorruptTurn(t *testing.T, s host.Store, ref host.TurnRef) {
	st := s.(*Store)
	if _, err := st.pool.Exec(t.Context(), `UPDATE turns SET phase = 'exploded'
		WHERE workspace_id = $1 AND session_id = $2 AND id = $3`, ref.WorkspaceID, ref.SessionID, ref.TurnID); err != nil {
		t.Fatalf("corrupt turn: %v", err)
	}
}

func (conformanceDriver) CorruptGoal(t *testing.T, s host.Store, ws, sessionID string) {
	st := s.(*Store)
	tag, err := st.pool.Exec(t.Context(), `UPDATE goals SET state_json = '{"goal": {"status": 7'
		WHERE workspace_id = $1 AND session_id = $2`, ws, sessionID)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("corrupt goal: %d rows, %v", tag.RowsAffected(), err)
	}
}

func (conformanceDriver) CorruptGoalOperation(t *testing.T, s host.Store, ws, clientSubmitID string) {
	st := s.(*Store)
	tag, err := st.pool.Exec(t.Context(), `UPDATE goal_operations SET op_json = 'not json'
		WHERE workspace_id = $1 AND client_submit_id = $2`, ws, clientSubmitID)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("corrupt goal operation: %d rows, %v", tag.RowsAffected(), err)
	}
}

// newSimRuntime is the sim agent behind runtime/acp, in-process; rate < 0
// answers without any delay.
func newSimRuntime(t testing.TB, rate time.Duration) *acp.Runtime {
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true, Logger: quietLogger(),
		Dial: sim.Dial(sim.Options{Rate: rate, Logger: quietLogger()})})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	return rt
}

func TestConformance(t *testing.T) {
	t.Parallel() // waits on WAL flushes mostly; overlaps with the other parallel tests
	conformance.Run(t, conformanceDriver{})
}
