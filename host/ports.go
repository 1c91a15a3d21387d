package host

import (
	"context"
	"errors"
	"time"
)

// Store is the canonical store port. Adapters (sqlite, pg) implement it and
// return ErrNotFound / ErrDuplicate / ErrUnavailable (wrapped is fine).
// Every method is scoped by workspace except the recovery and outbox scans,
// which the Host runs on behalf of the whole process.
type Store interface {
	// Update runs fn in one write transaction and commits if fn returns nil.
	// On PostgreSQL Tx.Session locks the row (SELECT … FOR UPDATE); SQLite
	// takes the write lock at BEGIN. fn must not keep the Tx after it returns.
	Update(ctx context.Context, fn func(Tx) error) error

	GetSession(ctx context.Context, ws, id string) (Session, error)
	ListSessions(ctx context.Context, ws string, q SessionQuery) (SessionPage, error)
	GetTurn(ctx context.Context, ws, sessionID, turnID string) (Turn, error)
	ListTurns(ctx context.Context, ws, sessionID string, q TurnQuery) (TurnPage, error)
	ListMessages(ctx context.Context, ws, sessionID string, q MessageQuery) (MessagePage, error)
	GetClaim(ctx context.Context, ws, clientSubmitID string) (SubmitClaim, error)

	// UnsettledTurns returns every Turn not yet settled (all workspaces),
	// skipping quarantined ones. Rows that cannot be decoded come back as
	// Quarantined candidates instead of failing the scan.
	UnsettledTurns(ctx context.Context) ([]Turn, []Quarantined, error)
	// Quarantine sets a record aside so later scans skip it.
	Quarantine(ctx context.Context, q Quarantined) error

	// PendingFacts returns the facts of outbox rows not yet published,
	// oldest first, created at or before the given time: from at most limit
	// rows, every fact of each (a row is never split).
	PendingFacts(ctx context.Context, before time.Time, limit int) ([]OutboxRow, error)
	// MarkPublished records that rows were delivered; they are never
	// pending again (both stores delete them).
	MarkPublished(ctx context.Context, ids []int64) error

	// Ping reports whether the store answers (readiness).
	Ping(ctx context.Context) error

	Close() error

	// Interactions and durable runtime operations (ports_interactions.go).
	InteractionStore
	// The session message queue (ports_queue.go).
	QueueStore
	// One-transaction catch-up reads for hubs (changes.go).
	ChangesStore
	// Recoverable tombstones: trash reads (ports_trash.go).
	TrashStore
	// Goals (goal_model.go).
	GoalStore
	// Session leases (ports_ownership.go): the fence of cluster mode.
	LeaseStore
	// Claimed outbox reads for relays on several replicas (relay_cluster.go).
	OutboxClaimer
	// One retention pass at a time across replicas (purge.go).
	PurgeLocker
}

// Tx is the narrow transaction writer the Host composes commands from.
// Reads inside a Tx see the transaction's own writes.
type Tx interface {
	// Session reads (and on PostgreSQL locks) one session, tombstoned or not.
	Session(ctx context.Context, ws, id string) (Session, error)
	Turn(ctx context.Context, ws, sessionID, turnID string) (Turn, error)
	Claim(ctx context.Context, ws, clientSubmitID string) (SubmitClaim, error)
	Message(ctx context.Context, ws, sessionID, messageID string) (Message, error)

	InsertSession(ctx context.Context, s Session) error // ErrDuplicate if the id exists
	UpdateSession(ctx context.Context, s Session) error // ErrNotFound if absent
	InsertTurn(ctx context.Context, t Turn) error
	// UpdateTurn writes the mutable columns; AppliedSeq only moves forward.
	UpdateTurn(ctx context.Context, t Turn) error
	InsertClaim(ctx context.Context, c SubmitClaim) error // ErrDuplicate on (workspace, clientSubmitId)
	// AdmitClaim is InsertClaim for an admission, which gives up on a
	// duplicate (it answers from the claim that exists): the duplicate
	// fails the transaction, reported by this call or by the
	// transaction's next round trip, so a store need not wait for it.
	AdmitClaim(ctx context.Context, c SubmitClaim) error
	UpdateClaim(ctx context.Context, c SubmitClaim) error
	// SetClaimState moves a claim to state without reading it first (an
	// acceptance knows its Turn's claim is there); ErrNotFound if absent,
	// reported by this call or by the transaction's next round trip.
	SetClaimState(ctx context.Context, ws, clientSubmitID string, state ClaimState, at time.Time) error
	// PutMessage inserts or replaces a message by (workspace, session, id).
	PutMessage(ctx context.Context, m Message) error
	// DeleteProvisionalSession hard-deletes a provisional session shell with
	// its turns, messages and claims (failed-create compensation only).
	DeleteProvisionalSession(ctx context.Context, ws, id string) error
	// AppendFacts writes outbox rows in this transaction and returns their
	// ids, one per fact, not decreasing: each run of one workspace's facts
	// shares one row and its id, and a later call's rows have greater ids. A store
	// may send the insert with COMMIT and fill the slice's elements then:
	// read them only after Update returned nil.
	AppendFacts(ctx context.Context, facts ...Fact) ([]int64, error)

	// Interactions and durable runtime operations (ports_interactions.go).
	InteractionTx
	// The session message queue (ports_queue.go).
	QueueTx
	// Streamed output appends (ports_output.go).
	OutputTx
	// Tombstones, restore and purge (ports_trash.go).
	TrashTx
	ForkTx
	// Goals (goal_model.go).
	GoalTx
	// The lease fence inside a write (ports_ownership.go).
	LeaseTx
}

// SessionQuery pages sessions newest first.
type SessionQuery struct {
	Cursor string // opaque, from SessionPage.NextCursor
	Limit  int
}

// SessionPage is one page of visible (non-provisional, non-deleted) sessions.
type SessionPage struct {
	Sessions   []Session
	NextCursor string
}

// TurnQuery pages turns newest first. Before is a Turn.Seq (0 = newest).
type TurnQuery struct {
	Before int64
	Limit  int
}

// TurnPage is one page of turns, newest first.
type TurnPage struct {
	Turns      []Turn
	HasMore    bool
	NextCursor int64
}

// MessageQuery selects messages by version. AfterVersion returns the oldest
// changes after it; BeforeVersion the newest changes before it. Results are
// always ascending by version.
type MessageQuery struct {
	AfterVersion  int64
	BeforeVersion int64
	TurnID        string
	Limit         int
}

// MessagePage is one page of messages, ascending by version.
type MessagePage struct {
	Messages []Message
	HasMore  bool
}

// OutboxRow is one durable fact awaiting publication. ID is its outbox
// row's: the facts a transaction appended share one row, which is
// published and marked as a whole.
type OutboxRow struct {
	ID   int64
	Fact Fact
	At   time.Time
}

// Observer receives facts after their transaction committed. Failure never
// changes a command's result; the outbox relay republishes what was missed.
type Observer interface {
	Publish(ctx context.Context, facts []Fact) error
}

// An InlineObserver's Publish never waits on I/O (an in-process bus). The
// Host then publishes on the committing goroutine when nothing of the
// session is queued before it, sparing a goroutine hand-off per commit; a
// network bus is called from a goroutine of its own so its round trip never
// delays the next commit.
type InlineObserver interface {
	Observer
	PublishesInline() bool
}

// Runtime is the provider port: a live agent connection per session.
type Runtime interface {
	// Start ensures a live provider session for a canonical session. With a
	// ProviderSessionID it resumes that conversation; when the agent cannot
	// load it, Start fails with ErrContextLost and never starts over
	// silently. Without one it starts a fresh provider session.
	Start(ctx context.Context, req StartRequest) (StartResult, error)
	// Dispatch sends one prompt. It returns after sink.Accepted succeeded
	// (the provider identity is durably bound) or with an error before that:
	// a *ProviderError is an explicit rejection, anything else leaves the
	// delivery outcome unknown. Output and the terminal follow through sink.
	Dispatch(ctx context.Context, req DispatchRequest, sink TurnSink) error
	// Cancel asks the provider to stop the exact Turn. Confirmed reports
	// that the provider acknowledged the request for that Turn.
	Cancel(ctx context.Context, ref TurnRef) (CancelReport, error)
	// Release drops this process's live binding of the session (lease
	// lost, shutdown): a running prompt is cancelled, but the provider
	// session itself is kept, so its next owner can load it.
	Release(ctx context.Context, ws, sessionID string) error
	// Destroy ends the provider session for good (ACP session/close where
	// the agent supports it). Only for a session that no longer exists,
	// such as a rolled-back provisional one.
	Destroy(ctx context.Context, ws, sessionID string) error
	// Describe names the agent for display; Simulated marks the sim agent.
	Describe() AgentInfo
	// Live reports the provider session this process holds live for the
	// session, starting nothing. A submit to a session that is live with
	// its recorded provider session admits and dispatches its Turn in one
	// commit (send.go); a binding lost after the answer makes that
	// dispatch fail locally, and the Turn goes back to queued.
	Live(ws, sessionID string) (providerSessionID string, ok bool)

	// The capabilities an agent may lack are part of the port, each with
	// a query or a typed refusal, so a wrapper that embeds Runtime keeps
	// them; embed NoRuntimeCapabilities in a runtime that has none.
	//
	// Delivering interaction answers (ports_interactions.go).
	InteractionResponder
	// Forking a provider session: ForkCapability says ForkNone when the
	// agent cannot (ports_fork.go).
	Forker
	// Applying settings to a live provider session (settings.go).
	SettingsUpdater
	// Steering a running Turn: SupportsSteering false when the agent
	// cannot (queue.go).
	SteeringRuntime
}

// NoRuntimeCapabilities gives a Runtime that embeds it the answers of an
// agent with none of the optional capabilities: it cannot fork, takes no
// steering, applies settings at the next Start and never has an
// interaction to answer.
type NoRuntimeCapabilities struct{}

// ReasonInteractionsUnsupported: the runtime never reports interactions,
// so no provider request waits for an answer.
const ReasonInteractionsUnsupported = "interactions_not_supported"

// RespondInteraction reports the answer superseded: nobody waits for it.
func (NoRuntimeCapabilities) RespondInteraction(context.Context, InteractionDelivery) (DeliveryReport, error) {
	return DeliveryReport{Result: DeliverySuperseded, Reason: ReasonInteractionsUnsupported}, nil
}

// ForkCapability reports that the agent cannot fork.
func (NoRuntimeCapabilities) ForkCapability() (ForkMode, string) {
	return ForkNone, ReasonForkUnsupported
}

// Fork refuses before anything reached an agent.
func (NoRuntimeCapabilities) Fork(context.Context, ForkRequest) (ForkResult, error) {
	return ForkResult{}, &LocalError{Code: ReasonForkUnsupported}
}

// UpdateSettings accepts: persisted settings apply at the next Start.
func (NoRuntimeCapabilities) UpdateSettings(context.Context, string, string, map[string]string) error {
	return nil
}

// SupportsSteering reports that no session's agent takes steering.
func (NoRuntimeCapabilities) SupportsSteering(string, string) bool { return false }

// SteeringReady is never called while SupportsSteering is false.
func (NoRuntimeCapabilities) SteeringReady(context.Context, TurnRef) error { return nil }

// AgentInfo labels the agent behind a runtime.
// Its JSON tags are the stored encoding (inside turn labels), not the client
// protocol: clients get protocol.AgentInfo.
type AgentInfo struct {
	Name string `json:"name"`
	// Version is what the agent reported about itself (ACP initialize
	// agentInfo), empty until it did.
	Version   string `json:"version,omitempty"`
	Simulated bool   `json:"simulated"`
	// Fork and ForkReason: what fork the agent attests now (Host.Agent
	// only; never recorded in turn labels).
	Fork       ForkMode `json:"fork,omitempty"`
	ForkReason string   `json:"forkReason,omitempty"`
}

// TurnRef is the canonical identity of a Turn.
type TurnRef struct {
	WorkspaceID string
	SessionID   string
	TurnID      string
}

// Key is the Turn's quarantine key: "workspace/session/turn".
func (r TurnRef) Key() string { return r.WorkspaceID + "/" + r.SessionID + "/" + r.TurnID }

// StartRequest asks for a live provider session.
type StartRequest struct {
	WorkspaceID       string
	SessionID         string
	ProviderSessionID string
	Settings          map[string]string
}

// StartResult reports the live provider session.
type StartResult struct {
	ProviderSessionID string
	// Created is true when this call started the provider session.
	Created bool
	// Resumed is true when the requested ProviderSessionID is live (or was
	// loaded) with its history.
	Resumed bool
}

// ErrContextLost is returned (wrapped) by Runtime.Start when the agent
// cannot load the requested provider session: its history is gone there.
var ErrContextLost = errors.New("the agent could not load the provider session")

// DispatchRequest is one prompt for the provider. ClientSubmitID is the only
// correlation identity the provider sees; canonical ids stay Host-owned.
type DispatchRequest struct {
	Ref               TurnRef
	ProviderSessionID string
	ClientSubmitID    string
	Content           MessageContent
	OccurredAt        time.Time
}

// TurnSink is how a runtime reports one Turn. Calls for one Turn are made in
// order from one goroutine.
type TurnSink interface {
	// Observed reports progress before acceptance (dispatched,
	// provider_observed, resolving_identity).
	Observed(ctx context.Context, phase TurnPhase) error
	// Accepted is the acceptance barrier: it returns only after the exact
	// provider identity is durably bound. The runtime must hold all output
	// until it returns, and report nothing more for the Turn if it fails.
	// What it already holds may go with it (Acceptance.Output, .Terminal)
	// and commits in the same transaction.
	Accepted(ctx context.Context, a Acceptance) error
	// Output reports agent output. Key identifies one message within the
	// Turn (for example "text-1" or "tool-<id>"); text is appended. The
	// Host may queue the event and commit it with the ones that follow
	// (batched while the previous commit is in flight); Interaction,
	// Subagent and Terminal commit what is queued first. An error for a
	// queued event surfaces from a later call.
	Output(ctx context.Context, ev OutputEvent) error
	// Terminal reports the provider-root end of the Turn.
	Terminal(ctx context.Context, t Terminal) error
	// Interaction reports that the agent waits for a decision (an approval,
	// a question, a plan). It is refused before acceptance, like Output.
	// The runtime keeps the provider request open until the Host delivers
	// the answer through InteractionResponder, the Turn is cancelled, or
	// the provider withdraws the request.
	Interaction(ctx context.Context, req InteractionRequest) error
	// Withdraw reports that the provider stopped waiting for a request it
	// had reported through Interaction.
	Withdraw(ctx context.Context, requestID string) error
	// Subagent reports that the agent started a sub-agent with its own
	// provider session inside this Turn. The Host records a child session
	// (same tree) with one accepted Turn and returns its identity and the
	// sink for it.
	Subagent(ctx context.Context, req SubagentRequest) (TurnRef, TurnSink, error)
	// Goal reports from the agent (goal_provider.go); a runtime whose
	// agent sends none never calls it.
	GoalReporter
	// Steering pulls for the running Turn (queue.go); only a runtime
	// that SupportsSteering calls it.
	SteeringSource
}

// Acceptance is what a runtime reports at the acceptance barrier: the exact
// provider identity and what it already holds for the Turn. Committing the
// held output (and an already known end) with the acceptance saves the
// commits that would follow it at once: the first words reach watchers one
// commit sooner, and an instant answer is one transaction after dispatch.
type Acceptance struct {
	ProviderSessionID, ProviderTurnID string
	// Output is output held at the barrier, numbered from the Turn's first
	// sequence number as any output; Final is ignored (it all commits here).
	Output []OutputEvent
	// Terminal is set when the prompt ended before the barrier and Output
	// is all of its output: the Turn settles in the acceptance transaction
	// and the runtime reports nothing more for it.
	Terminal *Terminal
	// More, when set, is called by the acceptance's transaction once it
	// has loaded the Turn and before it writes, so what the agent sent
	// while that read was in flight commits too: further output, numbered
	// after Output's, and the terminal when the prompt has ended and that
	// output is all of it (then, as with Terminal, the runtime reports
	// nothing more). A retried transaction calls it again; what an earlier
	// call returned is kept, so each call returns only what is new, and
	// after a terminal it is not called again. It runs while Accepted is
	// in progress, possibly on another goroutine. What it returned belongs
	// to the acceptance: a runtime that calls Accepted again after a
	// failure passes it in Output (and Terminal).
	More func() ([]OutputEvent, *Terminal)
}

// OutputEvent is one piece of agent output for a Turn.
type OutputEvent struct {
	// Seq numbers the Turn's output events 1, 2, 3 … in the order the
	// runtime reports them; the Host applies each once (Turn.AppliedSeq),
	// so a batch retried after an ambiguous commit is never doubled.
	Seq  int64
	Key  string
	Kind MessageKind
	// Text is appended to the message's text.
	Text string
	// Tool replaces the message's tool-call state when set.
	Tool *ToolCall
	// Done marks the message complete.
	Done bool
	// Final tells the sink that the runtime reports the Turn's Terminal
	// right after this event (the prompt already ended): the Host keeps it
	// queued for the settlement's transaction instead of starting a commit
	// of its own. A committer already running still takes it.
	Final bool
	// Inline tells the sink that the runtime has nothing queued behind
	// this event, so waiting for its commit delays nothing the runtime
	// holds: when no commit is running the sink commits on the caller's
	// goroutine and Output returns after it (a failure still surfaces
	// through the Turn's next flush). Without it Output only queues.
	Inline bool
}

// Terminal is how a Turn ended at the provider. StateLost means the provider
// lost the Turn (process exit, missing session): the Host settles it
// failed/execution_status_unknown unless it already has a terminal.
type Terminal struct {
	Outcome    TurnOutcome
	Reason     string
	StopReason string
	StateLost  bool
}

// CancelReport is the provider's answer to a cancel request.
type CancelReport struct {
	Confirmed bool
}
