package acp

import (
	"context"
	"encoding/json"

	acpsdk "github.com/coder/acp-go-sdk"
)

// HandleExtensionMethod routes the agent's extension methods: goal reports
// (goal.go) and steering pulls (steering.go); anything else is
// method-not-found.
func (cl *client) HandleExtensionMethod(ctx context.Context, method string, params json.RawMessage) (any, error) {
	switch method {
	case GoalMethod:
		return cl.goalNotification(params)
	case steeringPull:
		return cl.steeringPull(ctx, params)
	}
	return nil, acpsdk.NewMethodNotFound(method)
}
