package sim

import (
	"context"
	"encoding/json"
	"maps"

	"github.com/coder/acp-go-sdk"
)

// The sim agent's ACP extensions: steering (steer.go) and fork through a
// turn (fork.go). One handler per connection routes them by method.

var _ acp.ExtensionMethodHandler = (*agent)(nil)

// HandleExtensionMethod routes the client's extension methods.
func (a *agent) HandleExtensionMethod(_ context.Context, method string, params json.RawMessage) (any, error) {
	switch method {
	case SteeringReadyMethod:
		return a.steeringReady(params)
	case ForkThroughTurnMethod:
		return a.forkThroughTurn(method, params)
	}
	return nil, acp.NewMethodNotFound(method)
}

// capabilityMeta advertises the extensions this agent serves.
func (a *agent) capabilityMeta() map[string]any {
	meta := steeringCaps()
	maps.Copy(meta, a.forkMeta())
	return meta
}
