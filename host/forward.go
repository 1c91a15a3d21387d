package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
)

// Forwarded operation names (the wire operation names).
const (
	forwardSubmit = "turn.message.submit"
	forwardCancel = "turn.cancel"
	forwardUpdate = "session.update"
	forwardFork   = "session.fork"
	// forwardRelease: release a deleted session's runtime (delete.go).
	forwardRelease = "session.release"
)

// forwardSend runs SendInput on the owner replica and answers as if local.
func (h *Host) forwardSend(ctx context.Context, owner string, in SendInput) (SendResult, error) {
	var out SendResult
	err := h.forward(ctx, owner, forwardSubmit, in, &out)
	return out, err
}

// forwardCancelTurn runs CancelTurn on the owner replica.
func (h *Host) forwardCancelTurn(ctx context.Context, owner string, in CancelInput) (CancelResult, error) {
	var out CancelResult
	err := h.forward(ctx, owner, forwardCancel, in, &out)
	return out, err
}

func (h *Host) forward(ctx context.Context, owner, op string, in, out any) error {
	if isForwarded(ctx) {
		// The owner we were sent to does not own the session any more; do
		// not bounce the request around the cluster.
		return &Error{Code: CodeUnavailable, Reason: "owner_moved",
			Message: "the session moved to another replica while the request was in flight; retry"}
	}
	fwd := h.own.forwarder()
	if fwd == nil {
		return Errorf(CodeInternal, "no forwarder for a session owned by another replica")
	}
	data, err := json.Marshal(in)
	if err != nil {
		return wrap(CodeInternal, err, "encode forwarded request")
	}
	rep, err := fwd.Forward(ctx, owner, ForwardRequest{Op: op, Input: data})
	switch {
	case errors.Is(err, ErrNotDelivered):
		return &Error{Code: CodeUnavailable, Reason: ReasonOwnerUnreachable, Err: err,
			Message: "the replica that runs this session did not answer; nothing was done, retry"}
	case err != nil && op == forwardSubmit:
		return &Error{Code: CodeOutcomeUnknown, Reason: ReasonOwnerUnreachable, Err: err,
			Message: "the replica that runs this session took the request but its answer was lost; retrying the same clientSubmitId returns what happened"}
	case err != nil:
		return &Error{Code: CodeUnavailable, Reason: ReasonOwnerUnreachable, Err: err,
			Message: "the replica that runs this session did not answer; retry"}
	}
	if rep.Error != nil {
		return &Error{Code: rep.Error.Code, Reason: rep.Error.Reason, Message: rep.Error.Message}
	}
	if err := json.Unmarshal(rep.Result, out); err != nil {
		return wrap(CodeInternal, err, "decode forwarded reply")
	}
	return nil
}

// ServeForwarded runs one command another replica forwarded to this one,
// because this Host owns the session. It never forwards again.
func (h *Host) ServeForwarded(ctx context.Context, req ForwardRequest) ForwardReply {
	ctx = context.WithValue(ctx, forwardedKey{}, true)
	var (
		res any
		err error
	)
	switch req.Op {
	case forwardSubmit:
		var in SendInput
		if err = decodeStrict(req.Input, &in); err == nil {
			res, err = h.sendInput(ctx, in) // validated by the sending replica
		}
	case forwardCancel:
		var in CancelInput
		if err = decodeStrict(req.Input, &in); err == nil {
			res, err = h.CancelTurn(ctx, in)
		}
	case forwardFork:
		var in ForkSessionInput
		if err = decodeStrict(req.Input, &in); err == nil {
			res, err = h.ForkSession(ctx, in)
		}
	case forwardUpdate:
		var in UpdateSessionInput
		if err = decodeStrict(req.Input, &in); err == nil {
			res, err = h.UpdateSession(ctx, in) // validated again: settings.go
		}
	case forwardRelease:
		var in releaseInput
		if err = decodeStrict(req.Input, &in); err == nil {
			res, err = h.serveRelease(ctx, in)
		}
	default:
		err = Errorf(CodeInternal, "unknown forwarded operation %q", req.Op)
	}
	if err != nil {
		e := &Error{Code: CodeOf(err), Message: err.Error()}
		var he *Error
		if errors.As(err, &he) {
			e.Message, e.Reason = he.Message, he.Reason
		}
		return ForwardReply{Error: &ForwardError{Code: e.Code, Message: e.Message, Reason: e.Reason}}
	}
	data, err := json.Marshal(res)
	if err != nil {
		return ForwardReply{Error: &ForwardError{Code: CodeInternal, Message: "encode forwarded result"}}
	}
	return ForwardReply{Result: data}
}

func decodeStrict(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return wrap(CodeInvalidInput, err, "decode forwarded request")
	}
	return nil
}
