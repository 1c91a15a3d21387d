package host

import "time"

// CreateSessionInput creates an empty session, or one with initial content
// (which then behaves like SendInput under ClientSubmitID).
type CreateSessionInput struct {
	WorkspaceID    string
	Title          string
	Settings       map[string]string
	Content        *MessageContent
	ClientSubmitID string
	// CreatedBy is the principal's user id; CreatedByName its display name.
	CreatedBy     string
	CreatedByName string
	// Goal creates the session with an initial goal (goal.go), exclusive
	// with Content; no turn opens until the goal arms.
	Goal *GoalSpec
}

// CreateSessionResult is the created (or, on retry, existing) session and,
// with initial content, its first Turn.
type CreateSessionResult struct {
	Session Session
	Turn    *Turn
	// Goal is the initial goal's control result.
	Goal *GoalControlResult
}

// Placement chooses where a submission goes when a Turn is active.
type Placement string

const (
	PlacementNextTurn    Placement = "next_turn"
	PlacementCurrentTurn Placement = "current_turn"
)

// SendInput submits one user message to a session.
type SendInput struct {
	WorkspaceID     string
	SessionID       string
	ClientSubmitID  string
	Content         MessageContent
	Placement       Placement
	TurnID          string
	SubmittedBy     string
	SubmittedByName string
	// AllowFollowup: when steering cannot reach the running turn (the
	// agent lacks the capability or the turn is being interrupted), queue
	// the message as a follow-up instead of refusing it.
	AllowFollowup bool
}

// Disposition says what a submission became.
type Disposition string

const (
	DispositionTurnStarted Disposition = "turn_started"
	DispositionSteering    Disposition = "steering"
	DispositionFollowup    Disposition = "followup"
)

// SendResult is the outcome of SendInput. Replayed is true when the
// ClientSubmitID was already claimed and no new dispatch happened.
// Its JSON tags are the forwarding encoding (a submit reply between
// replicas), not the client protocol: clients get protocol.SendResult.
type SendResult struct {
	Disposition Disposition `json:"disposition"`
	Turn        *Turn       `json:"turn,omitempty"`
	Replayed    bool        `json:"replayed"`
	// Entry is the queue entry of a steering or follow-up submission and
	// QueueRevision the revision its admission committed (queue.go).
	Entry         *QueueEntry `json:"entry,omitempty"`
	QueueRevision int64       `json:"queueRevision,omitempty"`
}

// CancelInput asks to cancel one exact Turn. Wait bounds how long the call
// waits for canonical settlement (0 = do not wait).
type CancelInput struct {
	WorkspaceID string
	SessionID   string
	TurnID      string
	Wait        time.Duration
	// By and ByName: who asked to stop, recorded on the Turn.
	By, ByName string
	// Reason is the Host's own stop reason (ReasonGoalBudgetExhausted):
	// recorded on the Turn with the intent and kept as its terminal
	// reason, so the stop is explained whatever the runtime reports.
	// Empty for a person's cancel.
	Reason string `json:",omitempty"`
}

// CancelResult keeps durable intent, provider confirmation and canonical
// settlement as separate facts.
// Its JSON tags are the forwarding encoding (a cancel reply between
// replicas), not the client protocol: clients get protocol.CancelResult.
type CancelResult struct {
	IntentAccepted    bool `json:"intentAccepted"`
	ProviderConfirmed bool `json:"providerConfirmed"`
	Settled           bool `json:"settled"`
	Turn              Turn `json:"state"`
}

// UpdateSessionInput changes session metadata. Nil fields stay unchanged.
type UpdateSessionInput struct {
	WorkspaceID string
	SessionID   string
	Title       *string
	Pinned      *bool
	// Settings replaces the session's settings (the whole map) when set.
	Settings *map[string]string
}

// RecoveryReport is what Recover did.
type RecoveryReport struct {
	// RequeuedOperations: runtime operations a previous process had
	// leased; RecoveredOperations: deliveries attempted during recovery.
	RequeuedOperations  int           `json:"requeuedOperations"`
	RecoveredOperations int           `json:"recoveredOperations"`
	SettledTurns        []TurnRef     `json:"settledTurns"`
	Quarantined         []Quarantined `json:"quarantined"`
}
