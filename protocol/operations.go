package protocol

import (
	"encoding/json"

	"github.com/ensemble-dev/ensemble/host"
)

// Operation names: the "op" of a request frame. auth's permission table
// gives each its role; AuthRefresh is a request on the connection, not a
// workspace operation, so it has none.
const (
	OpSessionCreate        = "session.create"
	OpSessionGet           = "session.get"
	OpSessionList          = "session.list"
	OpSessionUpdate        = "session.update"
	OpSessionFork          = "session.fork"
	OpSessionExport        = "session.export"
	OpSessionImport        = "session.import"
	OpSessionContinueFresh = "session.continueFresh"
	OpSessionDelete        = "session.delete"
	OpSessionListDeleted   = "session.listDeleted"
	OpSessionRestore       = "session.restore"
	OpSessionPurge         = "session.purge"
	OpTurnSubmit           = "turn.message.submit"
	OpTurnCancel           = "turn.cancel"
	OpTurnInterrupt        = "turn.interrupt"
	OpQueueGet             = "queue.get"
	OpQueueRetract         = "queue.retract"
	OpInteractionRespond   = "interaction.respond"
	OpGoalControl          = "goal.control"
	OpGoalGet              = "goal.get"
	OpTurnList             = "turn.list"
	OpMessageList          = "message.list"
	OpSubscribe            = "subscribe"
	OpUnsubscribe          = "unsubscribe"
	OpPresenceTyping       = "presence.typing"

	OpAuthRefresh = "auth.refresh"
)

// Operations lists every workspace operation, in documentation order.
var Operations = []string{
	OpSessionCreate, OpSessionGet, OpSessionList, OpSessionUpdate, OpSessionFork,
	OpSessionExport, OpSessionImport, OpSessionContinueFresh, OpSessionDelete,
	OpSessionListDeleted, OpSessionRestore, OpSessionPurge, OpTurnSubmit, OpTurnCancel,
	OpQueueGet, OpQueueRetract, OpTurnInterrupt, OpInteractionRespond, OpGoalControl,
	OpGoalGet, OpTurnList, OpMessageList, OpSubscribe, OpUnsubscribe, OpPresenceTyping,
}

// WorkspaceRef is what every operation input has: the workspace it is
// scoped to, which the server authorizes before anything else.
type WorkspaceRef struct {
	Workspace string `json:"workspace"`
}

// WorkspaceID is the workspace an input is scoped to.
func (w WorkspaceRef) WorkspaceID() string { return w.Workspace }

// SessionRef names one session (session.get, session.export, goal.get).
type SessionRef struct {
	WorkspaceRef
	SessionID string `json:"sessionId"`
}

// SessionCreateInput is the input of session.create.
type SessionCreateInput struct {
	WorkspaceRef
	Content        *MessageContent   `json:"content"`
	ClientSubmitID string            `json:"clientSubmitId"`
	Title          string            `json:"title"`
	Agent          string            `json:"agent"`
	Settings       map[string]string `json:"settings"`
	Goal           *GoalSpec         `json:"goal"`
}

// SessionListInput is the input of session.list and session.listDeleted.
type SessionListInput struct {
	WorkspaceRef
	Cursor string `json:"cursor"`
	Limit  int    `json:"limit"`
}

// SessionUpdateInput is the input of session.update: nil fields stay.
type SessionUpdateInput struct {
	WorkspaceRef
	SessionID string             `json:"sessionId"`
	Title     *string            `json:"title"`
	Pinned    *bool              `json:"pinned"`
	Settings  *map[string]string `json:"settings"`
}

// SessionForkInput is the input of session.fork.
type SessionForkInput struct {
	WorkspaceRef
	SessionID      string `json:"sessionId"`
	TurnID         string `json:"turnId"`
	ClientSubmitID string `json:"clientSubmitId"`
}

// SessionImportInput is the input of session.import: Graph is an export
// file, decoded by host.DecodeGraph (its encoding is the export format's).
type SessionImportInput struct {
	WorkspaceRef
	User  string          `json:"user"`
	Graph json.RawMessage `json:"graph"`
}

// SessionIDsInput is the input of session.delete and session.purge: one
// of SessionID or SessionIDs.
type SessionIDsInput struct {
	WorkspaceRef
	SessionID  string   `json:"sessionId"`
	SessionIDs []string `json:"sessionIds"`
}

// SubmitInput is the input of turn.message.submit.
type SubmitInput struct {
	WorkspaceRef
	SessionID      string         `json:"sessionId"`
	ClientSubmitID string         `json:"clientSubmitId"`
	Content        MessageContent `json:"content"`
	Placement      host.Placement `json:"placement"`
	TurnID         string         `json:"turnId"`
	// AllowFollowup: steering that cannot reach the running turn is
	// queued as a follow-up instead of refused.
	AllowFollowup bool `json:"allowFollowup"`
}

// CancelInput is the input of turn.cancel and turn.interrupt.
type CancelInput struct {
	WorkspaceRef
	SessionID string `json:"sessionId"`
	TurnID    string `json:"turnId"`
	// Wait is in milliseconds; nil means the operation's default.
	Wait *int64 `json:"wait"`
}

// RetractInput is the input of queue.retract.
type RetractInput struct {
	WorkspaceRef
	SessionID string `json:"sessionId"`
	EntryID   string `json:"entryId"`
}

// RespondInput is the input of interaction.respond.
type RespondInput struct {
	WorkspaceRef
	SessionID string               `json:"sessionId"`
	TurnID    string               `json:"turnId"`
	RequestID string               `json:"requestId"`
	Response  *InteractionResponse `json:"response"`
}

// GoalControlInput is the input of goal.control.
type GoalControlInput struct {
	WorkspaceRef
	SessionID      string    `json:"sessionId"`
	ClientSubmitID string    `json:"clientSubmitId"`
	Action         string    `json:"action"`
	Goal           *GoalSpec `json:"goal"`
}

// TurnListInput is the input of turn.list.
type TurnListInput struct {
	WorkspaceRef
	SessionID string `json:"sessionId"`
	Before    int64  `json:"before"`
	Limit     int    `json:"limit"`
}

// MessageListInput is the input of message.list.
type MessageListInput struct {
	WorkspaceRef
	SessionID     string `json:"sessionId"`
	AfterVersion  int64  `json:"afterVersion"`
	BeforeVersion int64  `json:"beforeVersion"`
	TurnID        string `json:"turnId"`
	Limit         int    `json:"limit"`
}

// SubscribeInput is the input of subscribe.
type SubscribeInput struct {
	WorkspaceRef
	Topic     string  `json:"topic"`
	SessionID string  `json:"sessionId"`
	Resume    *Resume `json:"resume"`
	// Position resumes a session topic on any replica.
	Position *Position `json:"position"`
}

// UnsubscribeInput is the input of unsubscribe.
type UnsubscribeInput struct {
	WorkspaceRef
	Sub string `json:"sub"`
}

// TypingInput is the input of presence.typing.
type TypingInput struct {
	WorkspaceRef
	SessionID string `json:"sessionId"`
	Typing    bool   `json:"typing"`
}

// RefreshInput is the input of auth.refresh.
type RefreshInput struct {
	Token string `json:"token"`
}
