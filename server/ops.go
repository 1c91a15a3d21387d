package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/hub"
	"github.com/ensemble-dev/ensemble/protocol"
)

// caller is who runs an operation and over what. ws is nil over HTTP.
type caller struct {
	p  auth.Principal
	ws *wsSession
	// reply sends the response early (subscribe must answer under the
	// topic lock); the handler then returns errReplied.
	reply func(result any)
}

// errReplied: the handler already sent its response.
var errReplied = errors.New("replied")

// opFunc is one operation: its input decoder (strict JSON, no Host
// access) and its body. dispatch runs decode, authorize, the limits check
// and run, in that order, for every operation.
type opFunc struct {
	name   string
	decode func(raw json.RawMessage) (input, error)
	run    func(ctx context.Context, s *Server, c caller, in input) (any, error)
}

// input is what every operation input has (protocol.WorkspaceRef): the
// workspace it is scoped to.
type input interface{ WorkspaceID() string }

// checkLimits checks the size limits of the inputs that have limits
// beyond what decoding enforces.
func checkLimits(in input, l Limits) error {
	switch in := in.(type) {
	case protocol.SessionCreateInput:
		if err := checkContent(protocol.ToHost(in.Content, protocol.ToMessageContent), l); err != nil {
			return err
		}
		return checkSettings(in.Settings)
	case protocol.SessionUpdateInput:
		if in.Settings == nil {
			return nil
		}
		return checkSettings(*in.Settings)
	case protocol.SubmitInput:
		return checkContent(new(protocol.ToMessageContent(in.Content)), l)
	}
	return nil
}

// op builds an operation that decodes its input strictly, authorizes the
// caller in the input's workspace, checks the input's limits, then runs.
// No operation can skip the authorization step.
func op[T input](name string, run func(ctx context.Context, s *Server, c caller, in T) (any, error)) opFunc {
	return opFunc{
		name: name,
		decode: func(raw json.RawMessage) (input, error) {
			var in T
			if err := decodeStrict(raw, &in); err != nil {
				return nil, err
			}
			return in, nil
		},
		run: func(ctx context.Context, s *Server, c caller, in input) (any, error) { return run(ctx, s, c, in.(T)) },
	}
}

// call runs one operation for a caller: decode, authorize, limits, run.
func (fn opFunc) call(ctx context.Context, s *Server, c caller, raw json.RawMessage) (any, error) {
	in, err := fn.decode(raw)
	if err != nil {
		return nil, err
	}
	if err := authorize(c.p, in.WorkspaceID(), fn.name); err != nil {
		return nil, err
	}
	if err := checkLimits(in, s.limits); err != nil {
		return nil, err
	}
	return fn.run(ctx, s, c, in)
}

func authorize(p auth.Principal, ws, op string) error {
	if ws == "" {
		return errorf(host.CodeInvalidInput, "workspace is required")
	}
	role, ok := p.RoleIn(ws)
	if !ok {
		return errorf(host.CodeForbidden, "not a member of this workspace")
	}
	if !auth.Allowed(role, op) {
		return errorf(host.CodeForbidden, "role %s may not %s", role, op)
	}
	return nil
}

// decodeStrict decodes exactly one JSON object with no unknown fields. An
// absent input is an empty object.
func decodeStrict(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(orEmpty(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errorf(host.CodeInvalidInput, "input: %s", jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(host.CodeInvalidInput, "input: trailing data after the object")
	}
	return exactKeys(orEmpty(raw), reflect.TypeOf(v))
}

func orEmpty(raw json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(raw); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return json.RawMessage("{}")
	}
	return raw
}

// jsonProblem describes a decode error without echoing input values.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return "malformed JSON"
	case errors.As(err, &te):
		if te.Field != "" {
			return "field " + te.Field + " has the wrong type"
		}
		return "wrong JSON type"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	// DisallowUnknownFields: `json: unknown field "x"` names only the
	// field, which the client chose: bounded so it is not echoed at length.
	return truncate(err.Error(), 100)
}

// Operations whose names the protocol defines but this server does not
// implement yet answer unsupported; any other name is invalid input.
var ops = map[string]opFunc{
	protocol.OpSessionCreate:        op(protocol.OpSessionCreate, sessionCreate),
	protocol.OpSessionGet:           op(protocol.OpSessionGet, sessionGet),
	protocol.OpSessionList:          op(protocol.OpSessionList, sessionList),
	protocol.OpSessionUpdate:        op(protocol.OpSessionUpdate, sessionUpdate),
	protocol.OpSessionContinueFresh: op(protocol.OpSessionContinueFresh, sessionContinueFresh),
	protocol.OpTurnSubmit:           op(protocol.OpTurnSubmit, turnSubmit),
	protocol.OpTurnCancel:           op(protocol.OpTurnCancel, turnCancel),
	protocol.OpTurnList:             op(protocol.OpTurnList, turnList),
	protocol.OpMessageList:          op(protocol.OpMessageList, messageList),
	protocol.OpInteractionRespond:   op(protocol.OpInteractionRespond, interactionRespond),
	protocol.OpSubscribe:            op(protocol.OpSubscribe, subscribe),
	protocol.OpUnsubscribe:          op(protocol.OpUnsubscribe, unsubscribe),
	protocol.OpPresenceTyping:       op(protocol.OpPresenceTyping, presenceTyping),
	// trash_ops.go
	protocol.OpSessionDelete:      op(protocol.OpSessionDelete, sessionDelete),
	protocol.OpSessionListDeleted: op(protocol.OpSessionListDeleted, sessionListDeleted),
	protocol.OpSessionRestore:     op(protocol.OpSessionRestore, sessionRestore),
	protocol.OpSessionPurge:       op(protocol.OpSessionPurge, sessionPurge),
	protocol.OpGoalControl:        op(protocol.OpGoalControl, goalControl),
	protocol.OpGoalGet:            op(protocol.OpGoalGet, goalGet),
}

// dispatch runs one operation for a caller.
func (s *Server) dispatch(ctx context.Context, c caller, name string, raw json.RawMessage) (any, error) {
	fn, ok := ops[name]
	if ok {
		return fn.call(ctx, s, c, raw)
	}
	if !auth.KnownOperation(name) {
		return nil, errorf(host.CodeInvalidInput, "unknown operation")
	}
	// A documented operation not implemented yet is still authorized
	// first, so the answer never tells a non-member more than forbidden.
	var in protocol.WorkspaceRef
	if err := json.Unmarshal(orEmpty(raw), &in); err != nil {
		return nil, errorf(host.CodeInvalidInput, "input: %s", jsonProblem(err))
	}
	if err := authorize(c.p, in.Workspace, name); err != nil {
		return nil, err
	}
	return nil, errorf(host.CodeUnsupported, "%s is not supported by this server yet", name)
}

// opLabel keeps metric labels to the closed operation list.
func opLabel(name string) string {
	if auth.KnownOperation(name) || name == protocol.OpAuthRefresh {
		return name
	}
	return "unknown"
}

func sessionCreate(ctx context.Context, s *Server, c caller, in protocol.SessionCreateInput) (any, error) {
	if in.Agent != "" && in.Agent != s.cfg.Host.Agent().Name {
		return nil, errorf(host.CodeUnsupported, "this server runs one agent (%s); choosing another is not supported", s.cfg.Host.Agent().Name)
	}
	return wire(protocol.FromCreateSessionResult)(s.cfg.Host.CreateSession(ctx, host.CreateSessionInput{
		WorkspaceID: in.Workspace, Title: in.Title, Settings: in.Settings,
		Content: protocol.ToHost(in.Content, protocol.ToMessageContent), ClientSubmitID: in.ClientSubmitID,
		CreatedBy: c.p.UserID, CreatedByName: c.p.Name, Goal: protocol.ToHost(in.Goal, protocol.ToGoalSpec),
	}))
}

func sessionGet(ctx context.Context, s *Server, _ caller, in protocol.SessionRef) (any, error) {
	sess, err := s.cfg.Host.GetSession(ctx, in.Workspace, in.SessionID)
	if err != nil {
		return nil, err
	}
	return protocol.SessionResult{Session: protocol.FromSession(sess)}, nil
}

func sessionList(ctx context.Context, s *Server, _ caller, in protocol.SessionListInput) (any, error) {
	if in.Limit < 0 {
		return nil, errorf(host.CodeInvalidInput, "limit must not be negative")
	}
	p, err := s.cfg.Host.ListSessions(ctx, in.Workspace, host.SessionQuery{Cursor: in.Cursor, Limit: in.Limit})
	if p.Sessions == nil {
		p.Sessions = []host.Session{}
	}
	return wire(protocol.FromSessionPage)(p, err)
}

func sessionUpdate(ctx context.Context, s *Server, _ caller, in protocol.SessionUpdateInput) (any, error) {
	sess, err := s.cfg.Host.UpdateSession(ctx, host.UpdateSessionInput{
		WorkspaceID: in.Workspace, SessionID: in.SessionID, Title: in.Title, Pinned: in.Pinned,
		Settings: in.Settings,
	})
	if err != nil {
		return nil, err
	}
	return protocol.SessionResult{Session: protocol.FromSession(sess)}, nil
}

func sessionContinueFresh(ctx context.Context, s *Server, _ caller, in protocol.SessionRef) (any, error) {
	sess, err := s.cfg.Host.ContinueFresh(ctx, host.ContinueFreshInput{WorkspaceID: in.Workspace, SessionID: in.SessionID})
	if err != nil {
		return nil, err
	}
	return protocol.SessionResult{Session: protocol.FromSession(sess)}, nil
}

func turnSubmit(ctx context.Context, s *Server, c caller, in protocol.SubmitInput) (any, error) {
	return wire(protocol.FromSendResult)(s.cfg.Host.SendInput(ctx, host.SendInput{
		WorkspaceID: in.Workspace, SessionID: in.SessionID, ClientSubmitID: in.ClientSubmitID,
		Content: protocol.ToMessageContent(in.Content), Placement: in.Placement, TurnID: in.TurnID, SubmittedBy: c.p.UserID,
		SubmittedByName: c.p.Name, AllowFollowup: in.AllowFollowup,
	}))
}

// defaultCancelWait is how long turn.cancel waits for settlement unless
// the input says otherwise.
const defaultCancelWait = 5 * time.Second

func turnCancel(ctx context.Context, s *Server, c caller, in protocol.CancelInput) (any, error) {
	wait := defaultCancelWait
	if in.Wait != nil {
		if *in.Wait < 0 || *in.Wait > host.MaxCancelWait.Milliseconds() {
			return nil, errorf(host.CodeInvalidInput, "wait must be between 0 and %d ms", host.MaxCancelWait.Milliseconds())
		}
		wait = time.Duration(*in.Wait) * time.Millisecond
	}
	return wire(protocol.FromCancelResult)(s.cfg.Host.CancelTurn(ctx, host.CancelInput{
		WorkspaceID: in.Workspace, SessionID: in.SessionID, TurnID: in.TurnID, Wait: wait,
		By: c.p.UserID, ByName: c.p.Name,
	}))
}

func turnList(ctx context.Context, s *Server, _ caller, in protocol.TurnListInput) (any, error) {
	if in.Limit < 0 {
		return nil, errorf(host.CodeInvalidInput, "limit must not be negative")
	}
	p, err := s.cfg.Host.ListSessionTurns(ctx, in.Workspace, in.SessionID, host.TurnQuery{Before: in.Before, Limit: in.Limit})
	if err != nil {
		return nil, err
	}
	if p.Turns == nil {
		p.Turns = []host.Turn{}
	}
	// Each page carries its turns' interaction history, so paging back
	// shows past approvals with who answered them.
	from, to := host.SeqRange(p.Turns)
	hist := []host.Interaction{}
	if from <= to {
		if hist, err = s.cfg.Host.ListTurnInteractions(ctx, in.Workspace, in.SessionID, from, to); err != nil {
			return nil, err
		}
	}
	return protocol.TurnListResult{TurnPage: protocol.FromTurnPage(p), Interactions: protocol.FromInteractions(hist)}, nil
}

func messageList(ctx context.Context, s *Server, _ caller, in protocol.MessageListInput) (any, error) {
	if in.Limit < 0 {
		return nil, errorf(host.CodeInvalidInput, "limit must not be negative")
	}
	p, err := s.cfg.Host.ListSessionMessages(ctx, in.Workspace, in.SessionID, host.MessageQuery{
		AfterVersion: in.AfterVersion, BeforeVersion: in.BeforeVersion, TurnID: in.TurnID, Limit: in.Limit,
	})
	if p.Messages == nil {
		p.Messages = []host.Message{}
	}
	return wire(protocol.FromMessagePage)(p, err)
}

func subscribe(ctx context.Context, s *Server, c caller, in protocol.SubscribeInput) (any, error) {
	if c.ws == nil {
		return nil, errorf(host.CodeUnsupported, "subscribe is only available over the WebSocket")
	}
	release, err := s.admitSubscribe()
	if err != nil {
		return nil, err
	}
	defer release()
	err = s.cfg.Hub.Subscribe(ctx, c.ws.conn, hub.SubscribeRequest{
		Workspace: in.Workspace, Topic: in.Topic, SessionID: in.SessionID, Resume: in.Resume, Position: in.Position,
	}, func(res protocol.SubscribeResult) { c.reply(res) })
	if err != nil {
		return nil, err
	}
	return nil, errReplied
}

func unsubscribe(_ context.Context, s *Server, c caller, in protocol.UnsubscribeInput) (any, error) {
	if c.ws == nil {
		return nil, errorf(host.CodeUnsupported, "unsubscribe is only available over the WebSocket")
	}
	return protocol.UnsubscribeResult{Unsubscribed: s.cfg.Hub.Unsubscribe(c.ws.conn, in.Workspace, in.Sub)}, nil
}

// presenceTyping says the caller is (or stopped) typing in a session they
// watch on this connection; it lapses by itself after a few seconds, so a
// client repeats it while the person keeps typing.
func presenceTyping(_ context.Context, s *Server, c caller, in protocol.TypingInput) (any, error) {
	if c.ws == nil {
		return nil, errorf(host.CodeUnsupported, "presence.typing is only available over the WebSocket")
	}
	if in.SessionID == "" {
		return nil, errorf(host.CodeInvalidInput, "sessionId is required")
	}
	if !c.ws.conn.Watches(in.Workspace, in.SessionID) {
		return nil, errorf(host.CodeNotFound, "session %s is not watched on this connection: subscribe first", in.SessionID)
	}
	c.ws.conn.SetTyping(in.SessionID, in.Typing)
	return protocol.TypingResult{}, nil
}
