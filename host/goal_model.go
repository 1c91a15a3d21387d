package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"
)

// GoalStatus is where a Goal is in its lifecycle. active and paused are
// live; the rest are terminal until a new set (or a provider adoption).
type GoalStatus string

const (
	GoalActive          GoalStatus = "active"
	GoalPaused          GoalStatus = "paused"
	GoalAchieved        GoalStatus = "achieved"
	GoalFailed          GoalStatus = "failed"
	GoalBudgetExhausted GoalStatus = "budget_exhausted"
	GoalCleared         GoalStatus = "cleared"
)

// Valid reports whether s is a known status; stores refuse others.
func (s GoalStatus) Valid() bool {
	switch s {
	case GoalActive, GoalPaused, GoalAchieved, GoalFailed, GoalBudgetExhausted, GoalCleared:
		return true
	}
	return false
}

// GoalSpec is what a person (or the provider) asks for.
// Its JSON tags are the stored encoding (inside goal operations), not the
// client protocol: clients get protocol.GoalSpec.
type GoalSpec struct {
	Objective string `json:"objective"`
	Criteria  string `json:"criteria,omitempty"`
	// MaxTurns bounds the goal turns of one generation (0: the default).
	MaxTurns int `json:"maxTurns,omitempty"`
	// MaxDuration bounds the wall time of one generation, as a Go
	// duration ("30m"); empty: the default.
	MaxDuration string `json:"maxDuration,omitempty"`
}

// Goal is the durable desired projection of a session's goal.
// Its JSON tags are the stored encoding (goal records), not the client
// protocol: clients get protocol.Goal.
type Goal struct {
	GoalSpec
	Status GoalStatus `json:"status"`
	// Revision is the goal revision of the last mutation (set, pause,
	// resume, clear, provider adoption, a loop decision).
	Revision int64 `json:"revision"`
	// Generation is the revision at which the current objective began (a
	// set or an adoption); pause and resume keep it.
	Generation int64 `json:"generation"`
	// OperationID is the goal operation that made the current revision:
	// goal turns carry it (with Revision) as their provenance.
	OperationID string `json:"operationId"`
	// Source is "user" or "provider" (adopted from the agent).
	Source       string `json:"source"`
	SetBy        string `json:"setBy,omitempty"`
	SetByName    string `json:"setByName,omitempty"`
	PausedBy     string `json:"pausedBy,omitempty"`
	PausedByName string `json:"pausedByName,omitempty"`
	// TurnsUsed counts the goal turns of this generation that settled.
	TurnsUsed int `json:"turnsUsed"`
	// ActiveTurnID is the goal turn running now (empty: none).
	ActiveTurnID string `json:"activeTurnId,omitempty"`
	// ArmedRevision is the revision whose goal_arm turn was admitted;
	// later turns of that revision are continuations.
	ArmedRevision int64 `json:"armedRevision,omitempty"`
	// EndReason says why a terminal status was reached.
	EndReason string    `json:"endReason,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Live reports whether the goal may still run turns (active or paused).
func (g *Goal) Live() bool { return g != nil && (g.Status == GoalActive || g.Status == GoalPaused) }

// GoalObservation is the last thing the provider reported about the goal,
// kept apart from the desired projection (the seed's GoalState.Observed).
// Its JSON tags are the stored encoding (inside GoalState), not the client
// protocol: clients get protocol.GoalObservation.
type GoalObservation struct {
	Status    string    `json:"status"`
	Objective string    `json:"objective,omitempty"`
	Summary   string    `json:"summary,omitempty"`
	TurnID    string    `json:"turnId,omitempty"`
	Revision  int64     `json:"revision"`
	At        time.Time `json:"at"`
}

// GoalState is one session's goal record: the desired projection, the last
// provider observation and the versions that order their changes. It is
// the payload of goal.get and of every goal_state event.
// Its JSON tags are the stored and outbox-fact encoding, not the client
// protocol: clients get protocol.GoalState.
type GoalState struct {
	WorkspaceID string `json:"workspace"`
	SessionID   string `json:"sessionId"`
	// Revision is the session's goal revision; it never goes back, also
	// across clear and set.
	Revision int64 `json:"revision"`
	// Seq counts public projection changes (revision changes and loop
	// progress such as turnsUsed); watchers apply a state only when its
	// Seq is higher than the one they hold.
	Seq int64 `json:"seq"`
	// RevisedAtTurn is the session's turn count when Revision last
	// changed: an agent report from a turn admitted at or before it was
	// dispatched against an older revision and is never adopted.
	RevisedAtTurn int64 `json:"revisedAtTurn"`
	// Goal is nil when the session has none or it was cleared.
	Goal      *Goal            `json:"goal,omitempty"`
	Observed  *GoalObservation `json:"observed,omitempty"`
	UpdatedAt time.Time        `json:"updatedAt"`
	// Held is true when an active goal waits for a person's resume: it
	// was restored from the Trash or imported, and restore starts no
	// agent. It is derived on read (goal.get, snapshots), never stored,
	// and set on the goal_state fact committed with the fence that holds
	// the goal (delete, import); a later revision is never held.
	Held bool `json:"held,omitempty"`
}

// GoalOperationState is the lifecycle of a durable goal operation.
type GoalOperationState string

const (
	// GoalOpAccepted: committed; the Host owns the rest (fencing the old
	// generation, arming the new one) even across restarts.
	GoalOpAccepted GoalOperationState = "accepted"
	// GoalOpApplied: every effect is done.
	GoalOpApplied GoalOperationState = "applied"
	// GoalOpFailed: it could not be applied (Error says why).
	GoalOpFailed GoalOperationState = "failed"
)

// Goal actions.
const (
	GoalActionSet    = "set"
	GoalActionPause  = "pause"
	GoalActionResume = "resume"
	GoalActionClear  = "clear"
	// GoalActionAdopt is a provider-authored goal (TurnSink.ReportGoal).
	GoalActionAdopt = "adopt"
)

// GoalOperation is one durable goal mutation, keyed by (workspace,
// clientSubmitId) so a retry anywhere returns it instead of repeating it.
// Its JSON tags are the stored encoding (goal operation records), not the
// client protocol: clients get protocol.GoalOperation.
type GoalOperation struct {
	WorkspaceID    string             `json:"workspace"`
	ClientSubmitID string             `json:"clientSubmitId"`
	ID             string             `json:"id"`
	SessionID      string             `json:"sessionId"`
	Action         string             `json:"action"`
	Digest         string             `json:"digest"`
	Spec           *GoalSpec          `json:"goal,omitempty"`
	Revision       int64              `json:"revision"`
	State          GoalOperationState `json:"state"`
	Error          string             `json:"error,omitempty"`
	By             string             `json:"by,omitempty"`
	ByName         string             `json:"byName,omitempty"`
	CreatedAt      time.Time          `json:"createdAt"`
	UpdatedAt      time.Time          `json:"updatedAt"`
}

// GoalFenceState: pending until no live turn of the fenced generation
// remains, then done.
type GoalFenceState string

const (
	GoalFencePending GoalFenceState = "pending"
	GoalFenceDone    GoalFenceState = "done"
)

// GoalFence revokes the work of one exact goal identity (operation id and
// revision). It is written in the transaction of the mutation that
// replaces that identity, before any provider call; a turn whose
// provenance matches it is cancelled and its result never advances a goal.
type GoalFence struct {
	WorkspaceID string         `json:"workspace"`
	SessionID   string         `json:"sessionId"`
	OperationID string         `json:"operationId"`
	Revision    int64          `json:"revision"`
	ByOperation string         `json:"byOperation"`
	State       GoalFenceState `json:"state"`
	CreatedAt   time.Time      `json:"createdAt"`
	UpdatedAt   time.Time      `json:"updatedAt"`
}

// Goal turn kinds: the Turn.Origin and GoalProvenance.Kind of turns the
// goal loop admits.
const (
	OriginGoalArm          = "goal_arm"
	OriginGoalContinuation = "goal_continuation"
)

// ReasonGoalBudgetExhausted is the stop reason (Turn.CancelReason and
// FailureReason) of a goal turn the Host cancelled because the goal's wall
// time budget ran out while it ran.
const ReasonGoalBudgetExhausted = "goal_budget_exhausted"

// GoalProvenance is the immutable goal identity a goal turn was admitted
// for. Only a turn whose provenance equals the goal's current operation
// and revision may advance it.
// Its JSON tags are the stored encoding (inside turn labels), not the client
// protocol: clients get protocol.GoalProvenance.
type GoalProvenance struct {
	Kind        string `json:"kind"`
	OperationID string `json:"operationId"`
	Revision    int64  `json:"revision"`
	Generation  int64  `json:"generation"`
	// Number is the goal turn's number within its generation (1-based).
	Number int `json:"number"`
}

// FactGoalState is committed with every change of the public goal
// projection; it carries the new state so every replica pushes each
// change, in order, without a reread.
const FactGoalState = "goal_state"

// GoalStore is the store port for goals. Every read is scoped by
// workspace except the recovery scans, which run for the whole process.
type GoalStore interface {
	GetGoal(ctx context.Context, ws, sessionID string) (GoalState, error) // ErrNotFound: no goal ever
	GetGoalOperation(ctx context.Context, ws, clientSubmitID string) (GoalOperation, error)
	// LiveGoals lists goal states whose goal is active (all workspaces),
	// of sessions that are not deleted. A record that does not decode is
	// returned as a Quarantined candidate (QuarantineKindGoal) instead of
	// failing the scan, and quarantined records are left out.
	LiveGoals(ctx context.Context) ([]GoalState, []Quarantined, error)
	// GoalFenced reports whether a fence (pending or done) names the exact
	// identity (operation id, revision).
	GoalFenced(ctx context.Context, ws, sessionID, operationID string, revision int64) (bool, error)
	// PendingGoalFences lists fences not yet done, oldest first.
	PendingGoalFences(ctx context.Context) ([]GoalFence, error)
	// PendingGoalOperations lists operations still accepted, oldest
	// first; undecodable ones come back as Quarantined candidates
	// (QuarantineKindGoalOperation), quarantined ones are left out.
	PendingGoalOperations(ctx context.Context) ([]GoalOperation, []Quarantined, error)
}

// Quarantine kinds of goal records. A goal's key is
// "<workspace>/<session>", a goal operation's "<workspace>/<clientSubmitId>".
const (
	QuarantineKindGoal          = "goal"
	QuarantineKindGoalOperation = "goal_operation"
)

// ReasonGoalRecordCorrupt is the typed error reason of a goal read (goal.get,
// goal.control) whose stored record does not decode.
const ReasonGoalRecordCorrupt = "goal_record_corrupt"

// GetGoal, Tx.Goal, GetGoalOperation and Tx.GoalOperation wrap ErrCorrupt
// when the stored record does not decode.

// GoalTx is the transactional goal writer.
type GoalTx interface {
	Goal(ctx context.Context, ws, sessionID string) (GoalState, error)
	// PutGoal inserts or replaces the session's goal state. It refuses
	// (ErrConflict) to move Revision or Seq backwards.
	PutGoal(ctx context.Context, g GoalState) error
	GoalOperation(ctx context.Context, ws, clientSubmitID string) (GoalOperation, error)
	InsertGoalOperation(ctx context.Context, op GoalOperation) error // ErrDuplicate on (workspace, clientSubmitId)
	// UpdateGoalOperation writes State, Revision, Error and UpdatedAt.
	UpdateGoalOperation(ctx context.Context, op GoalOperation) error
	InsertGoalFence(ctx context.Context, f GoalFence) error // ErrDuplicate on (workspace, session, operation, revision)
	UpdateGoalFence(ctx context.Context, f GoalFence) error
	// DeleteGoalFence removes the fence on the exact identity only if
	// byOperation wrote it (ErrNotFound otherwise): a failed delete lifts
	// its own hold and no other fence.
	DeleteGoalFence(ctx context.Context, ws, sessionID, operationID string, revision int64, byOperation string) error
	// GoalFenced reports whether a fence (pending or done) names the exact
	// identity (operation id, revision).
	GoalFenced(ctx context.Context, ws, sessionID, operationID string, revision int64) (bool, error)
}

// goalDigest is what a retry of the same goal operation must match.
func goalDigest(sessionID, action string, spec *GoalSpec) string {
	b, _ := json.Marshal(struct {
		S string    `json:"s"`
		A string    `json:"a"`
		G *GoalSpec `json:"g,omitempty"`
	}{sessionID, action, spec})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// GoalSummary is the compact goal a session list row shows (a badge).
// Its JSON tags are the forwarding encoding (inside Session), not the client
// protocol: clients get protocol.GoalSummary.
type GoalSummary struct {
	Status GoalStatus `json:"status"`
	// Objective is cut to GoalSummaryObjectiveMax runes: the row shows a
	// hint, goal.get has the whole goal.
	Objective string `json:"objective"`
	// Held: an active goal waiting for a person's resume (GoalState.Held).
	Held bool `json:"held,omitempty"`
}

// GoalSummaryObjectiveMax bounds GoalSummary.Objective, in runes.
const GoalSummaryObjectiveMax = 80

// SummarizeGoal builds a session's GoalSummary from its stored goal record
// and the identity "operationId revision" of its newest fence (empty:
// none), both read by the store in the session read's query. Fences only
// ever name the current or an older revision, so the current identity is
// fenced exactly when it is the newest fence. A record that does not
// decode or has no live goal gives nil: the list stays readable while the
// goal loop quarantines it.
func SummarizeGoal(stateJSON []byte, newestFence string) *GoalSummary {
	if len(stateJSON) == 0 {
		return nil
	}
	var st GoalState
	if json.Unmarshal(stateJSON, &st) != nil || !st.Goal.Live() {
		return nil
	}
	g := st.Goal
	obj := g.Objective
	if r := []rune(obj); len(r) > GoalSummaryObjectiveMax {
		obj = string(r[:GoalSummaryObjectiveMax-1]) + "…"
	}
	return &GoalSummary{Status: g.Status, Objective: obj,
		Held: g.Status == GoalActive && newestFence == g.OperationID+" "+strconv.FormatInt(g.Revision, 10)}
}
