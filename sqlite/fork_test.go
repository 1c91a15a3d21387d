package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
)

// NewRuntimeForking implements conformance.Driver: the sim agent
// advertising through-turn fork, only ACP session/fork, or no fork.
func (conformanceDriver) NewRuntimeForking(t *testing.T, mode host.ForkMode) host.Runtime {
	support := map[host.ForkMode]sim.ForkSupport{host.ForkAnyTurn: sim.ForkThroughTurn,
		host.ForkLatestTurn: sim.ForkWholeSession, host.ForkNone: sim.ForkOff}[mode]
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true,
		Dial: sim.Dial(sim.Options{Rate: time.Millisecond, Fork: support})})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	return rt
}
