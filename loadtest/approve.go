package loadtest

import (
	"context"
	"errors"

	"github.com/ensemble-dev/ensemble/auth"
)

// approve: many watchers racing to answer the same interactions. It needs
// interaction.respond; while the server answers it "unsupported" the
// scenario reports that it is not yet possible.
func (r *runner) approve(ctx context.Context) *Result {
	res := &Result{Name: "approve"}
	ws := r.workspace("ap", 0)
	d, err := newDriver(ctx, r.addrs[0], r.token("lt-driver", auth.RoleMember, ws))
	if err != nil {
		res.Skipped = "driver: " + err.Error()
		return res
	}
	defer d.c.Close()
	err = d.c.Call(ctx, "interaction.respond", map[string]any{"workspace": ws, "sessionId": "ses_none",
		"turnId": "turn_none", "requestId": "req_none", "response": map[string]any{"optionId": "allow"}}, nil)
	var we *WireError
	if errors.As(err, &we) && we.Code == "unsupported" {
		res.Skipped = "not yet possible: this server answers interaction.respond \"unsupported\" (interactions are not implemented yet)"
		return res
	}
	res.Skipped = "not implemented in the harness yet: the server supports interaction.respond, but the racing-approvers scenario was not written in this change"
	return res
}
