package protocol

import (
	"encoding/json"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Session is host.Session as clients see it.
type Session struct {
	WorkspaceID       string            `json:"workspace"`
	ID                string            `json:"id"`
	ParentID          string            `json:"parentId,omitempty"`
	RootID            string            `json:"rootId"`
	Title             string            `json:"title"`
	TitleExplicit     bool              `json:"titleExplicit"`
	Agent             string            `json:"agent"`
	Simulated         bool              `json:"simulated"`
	Settings          map[string]string `json:"settings,omitempty"`
	Pinned            bool              `json:"pinned"`
	ProviderSessionID string            `json:"providerSessionId,omitempty"`
	MessageVersion    int64             `json:"messageVersion"`
	TurnCount         int64             `json:"turnCount"`
	ActiveTurnID      string            `json:"activeTurnId,omitempty"`
	ContextLost       bool              `json:"contextLost,omitempty"`
	CreatedBy         string            `json:"createdBy,omitempty"`
	CreatedAt         time.Time         `json:"createdAt"`
	UpdatedAt         time.Time         `json:"updatedAt"`
	DeletedAt         *time.Time        `json:"deletedAt,omitempty"`
	Goal              *GoalSummary      `json:"goal,omitempty"`
}

// Turn is host.Turn as clients see it.
type Turn struct {
	WorkspaceID          string           `json:"workspace"`
	SessionID            string           `json:"sessionId"`
	ID                   string           `json:"id"`
	Seq                  int64            `json:"seq"`
	Origin               string           `json:"origin"`
	Phase                host.TurnPhase   `json:"phase"`
	Outcome              host.TurnOutcome `json:"outcome,omitempty"`
	FailureReason        string           `json:"failureReason,omitempty"`
	StopReason           string           `json:"stopReason,omitempty"`
	ProviderSessionID    string           `json:"providerSessionId,omitempty"`
	ProviderTurnID       string           `json:"providerTurnId,omitempty"`
	ClientSubmitID       string           `json:"clientSubmitId,omitempty"`
	IdentityAnchorTurnID string           `json:"identityAnchorTurnId,omitempty"`
	Retracted            bool             `json:"retracted,omitempty"`
	CancelRequested      bool             `json:"cancelRequested,omitempty"`
	SubmittedBy          string           `json:"submittedBy,omitempty"`
	TurnLabels
	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
	SettledAt *time.Time `json:"settledAt,omitempty"`
}

// Message is host.Message as clients see it.
type Message struct {
	WorkspaceID string           `json:"workspace"`
	SessionID   string           `json:"sessionId"`
	ID          string           `json:"id"`
	TurnID      string           `json:"turnId"`
	Role        host.Role        `json:"role"`
	Kind        host.MessageKind `json:"kind"`
	Version     int64            `json:"version"`
	Ordinal     int64            `json:"ordinal"`
	Content     MessageContent   `json:"content"`
	Tool        *ToolCall        `json:"tool,omitempty"`
	Streaming   bool             `json:"streaming"`
	Author      string           `json:"author,omitempty"`
	AuthorName  string           `json:"authorName,omitempty"`
	CreatedAt   time.Time        `json:"createdAt"`
	UpdatedAt   time.Time        `json:"updatedAt"`
}

// Interaction is host.Interaction as clients see it.
type Interaction struct {
	WorkspaceID    string                `json:"workspace"`
	SessionID      string                `json:"sessionId"`
	TurnID         string                `json:"turnId"`
	RequestID      string                `json:"requestId"`
	RootSessionID  string                `json:"rootSessionId"`
	Kind           host.InteractionKind  `json:"kind"`
	Title          string                `json:"title"`
	Prompt         string                `json:"prompt,omitempty"`
	Options        []InteractionOption   `json:"options"`
	Tool           *ToolCall             `json:"tool,omitempty"`
	State          host.InteractionState `json:"state"`
	Response       *InteractionResponse  `json:"response,omitempty"`
	AnsweredBy     string                `json:"answeredBy,omitempty"`
	AnsweredByName string                `json:"answeredByName,omitempty"`
	AnsweredAt     *time.Time            `json:"answeredAt,omitempty"`
	Resolution     string                `json:"resolution,omitempty"`
	OperationID    string                `json:"operationId,omitempty"`
	CreatedAt      time.Time             `json:"createdAt"`
	UpdatedAt      time.Time             `json:"updatedAt"`
}

// GoalState is host.GoalState as clients see it.
type GoalState struct {
	WorkspaceID   string           `json:"workspace"`
	SessionID     string           `json:"sessionId"`
	Revision      int64            `json:"revision"`
	Seq           int64            `json:"seq"`
	RevisedAtTurn int64            `json:"revisedAtTurn"`
	Goal          *Goal            `json:"goal,omitempty"`
	Observed      *GoalObservation `json:"observed,omitempty"`
	UpdatedAt     time.Time        `json:"updatedAt"`
	Held          bool             `json:"held,omitempty"`
}

// AgentInfo is host.AgentInfo as clients see it.
type AgentInfo struct {
	Name       string        `json:"name"`
	Version    string        `json:"version,omitempty"`
	Simulated  bool          `json:"simulated"`
	Fork       host.ForkMode `json:"fork,omitempty"`
	ForkReason string        `json:"forkReason,omitempty"`
}

// Queue is host.Queue as clients see it.
type Queue struct {
	Revision    int64        `json:"revision"`
	FenceTurnID string       `json:"fenceTurnId,omitempty"`
	Entries     []QueueEntry `json:"entries"`
	Steering    bool         `json:"steering"`
}

// QueueEntry is host.QueueEntry as clients see it.
type QueueEntry struct {
	WorkspaceID      string               `json:"workspace"`
	SessionID        string               `json:"sessionId"`
	ID               string               `json:"id"`
	Position         int64                `json:"position"`
	Disposition      host.Disposition     `json:"disposition"`
	State            host.QueueEntryState `json:"state"`
	ClientSubmitID   string               `json:"clientSubmitId"`
	Author           string               `json:"author"`
	AuthorName       string               `json:"authorName,omitempty"`
	Content          MessageContent       `json:"content"`
	TargetTurnID     string               `json:"targetTurnId,omitempty"`
	TurnID           string               `json:"turnId,omitempty"`
	AdmittedRevision int64                `json:"admittedRevision"`
	Revision         int64                `json:"revision"`
	RetractedBy      string               `json:"retractedBy,omitempty"`
	CreatedAt        time.Time            `json:"createdAt"`
	UpdatedAt        time.Time            `json:"updatedAt"`
}

// CreateSessionResult is host.CreateSessionResult as clients see it.
type CreateSessionResult struct {
	Session Session            `json:"session"`
	Turn    *Turn              `json:"turn,omitempty"`
	Goal    *GoalControlResult `json:"goal,omitempty"`
}

// SessionPage is host.SessionPage as clients see it.
type SessionPage struct {
	Sessions   []Session `json:"sessions"`
	NextCursor string    `json:"nextCursor,omitempty"`
}

// TurnPage is host.TurnPage as clients see it.
type TurnPage struct {
	Turns      []Turn `json:"turns"`
	HasMore    bool   `json:"hasMore"`
	NextCursor int64  `json:"nextCursor,omitempty"`
}

// MessagePage is host.MessagePage as clients see it.
type MessagePage struct {
	Messages []Message `json:"messages"`
	HasMore  bool      `json:"hasMore"`
}

// SendResult is host.SendResult as clients see it.
type SendResult struct {
	Disposition   host.Disposition `json:"disposition"`
	Turn          *Turn            `json:"turn,omitempty"`
	Replayed      bool             `json:"replayed"`
	Entry         *QueueEntry      `json:"entry,omitempty"`
	QueueRevision int64            `json:"queueRevision,omitempty"`
}

// CancelResult is host.CancelResult as clients see it.
type CancelResult struct {
	IntentAccepted    bool `json:"intentAccepted"`
	ProviderConfirmed bool `json:"providerConfirmed"`
	Settled           bool `json:"settled"`
	Turn              Turn `json:"state"`
}

// RespondResult is host.RespondResult as clients see it.
type RespondResult struct {
	Disposition host.InteractionDisposition `json:"disposition"`
	Interaction Interaction                 `json:"interaction"`
}

// RestoreGraphResult is host.RestoreGraphResult as clients see it.
type RestoreGraphResult struct {
	Sessions []string `json:"sessions"`
	Created  bool     `json:"created"`
}

// DeleteSessionsResult is host.DeleteSessionsResult as clients see it.
type DeleteSessionsResult struct {
	DeletedSessionIDs []string           `json:"deletedSessionIds"`
	Components        []DeletedComponent `json:"components"`
	CleanupFailures   []string           `json:"cleanupFailures,omitempty"`
}

// DeletedPage is host.DeletedPage as clients see it.
type DeletedPage struct {
	Sessions   []DeletedSession `json:"sessions"`
	NextCursor string           `json:"nextCursor,omitempty"`
}

// RestoreResult is host.RestoreResult as clients see it.
type RestoreResult struct {
	Session            Session  `json:"session"`
	RestoredSessionIDs []string `json:"restoredSessionIds"`
	Restored           bool     `json:"restored"`
}

// PurgeResult is host.PurgeResult as clients see it.
type PurgeResult struct {
	Purged []PurgedTree `json:"purged"`
	Kept   []string     `json:"kept"`
	Counts PurgeCounts  `json:"counts"`
}

// GoalControlResult is host.GoalControlResult as clients see it.
type GoalControlResult struct {
	Goal           *Goal         `json:"goal,omitempty"`
	State          GoalState     `json:"state"`
	IntentAccepted bool          `json:"intentAccepted"`
	Operation      GoalOperation `json:"operation"`
	Replayed       bool          `json:"replayed"`
}

// RetractResult is host.RetractResult as clients see it.
type RetractResult struct {
	Entry         QueueEntry `json:"entry"`
	QueueRevision int64      `json:"queueRevision"`
}

// InterruptResult is host.InterruptResult as clients see it.
type InterruptResult struct {
	Turn Turn `json:"turn"`
}

// GoalSummary is host.GoalSummary as clients see it.
type GoalSummary struct {
	Status    host.GoalStatus `json:"status"`
	Objective string          `json:"objective"`
	Held      bool            `json:"held,omitempty"`
}

// TurnLabels is host.TurnLabels as clients see it.
type TurnLabels struct {
	SubmittedByName string          `json:"submittedByName,omitempty"`
	CanceledBy      string          `json:"canceledBy,omitempty"`
	CanceledByName  string          `json:"canceledByName,omitempty"`
	CancelReason    string          `json:"cancelReason,omitempty"`
	Agent           *AgentInfo      `json:"agent,omitempty"`
	Goal            *GoalProvenance `json:"goal,omitempty"`
}

// MessageContent is host.MessageContent as clients see it.
type MessageContent struct {
	Text        string          `json:"text"`
	DisplayText string          `json:"displayText,omitempty"`
	Attachments []AttachmentRef `json:"attachments,omitempty"`
	Quotes      []Quote         `json:"quotes,omitempty"`
}

// ToolCall is host.ToolCall as clients see it.
type ToolCall struct {
	ID     string          `json:"id"`
	Title  string          `json:"title,omitempty"`
	Kind   string          `json:"kind,omitempty"`
	Status string          `json:"status,omitempty"`
	Input  json.RawMessage `json:"input,omitempty"`
	Output string          `json:"output,omitempty"`
	Diffs  []ToolDiff      `json:"diffs,omitempty"`
}

// InteractionOption is host.InteractionOption as clients see it.
type InteractionOption struct {
	ID   string `json:"optionId"`
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

// InteractionResponse is host.InteractionResponse as clients see it.
type InteractionResponse struct {
	OptionID string          `json:"optionId"`
	Payload  json.RawMessage `json:"payload,omitempty"`
}

// Goal is host.Goal as clients see it.
type Goal struct {
	GoalSpec
	Status        host.GoalStatus `json:"status"`
	Revision      int64           `json:"revision"`
	Generation    int64           `json:"generation"`
	OperationID   string          `json:"operationId"`
	Source        string          `json:"source"`
	SetBy         string          `json:"setBy,omitempty"`
	SetByName     string          `json:"setByName,omitempty"`
	PausedBy      string          `json:"pausedBy,omitempty"`
	PausedByName  string          `json:"pausedByName,omitempty"`
	TurnsUsed     int             `json:"turnsUsed"`
	ActiveTurnID  string          `json:"activeTurnId,omitempty"`
	ArmedRevision int64           `json:"armedRevision,omitempty"`
	EndReason     string          `json:"endReason,omitempty"`
	StartedAt     time.Time       `json:"startedAt"`
	UpdatedAt     time.Time       `json:"updatedAt"`
}

// GoalObservation is host.GoalObservation as clients see it.
type GoalObservation struct {
	Status    string    `json:"status"`
	Objective string    `json:"objective,omitempty"`
	Summary   string    `json:"summary,omitempty"`
	TurnID    string    `json:"turnId,omitempty"`
	Revision  int64     `json:"revision"`
	At        time.Time `json:"at"`
}

// DeletedComponent is host.DeletedComponent as clients see it.
type DeletedComponent struct {
	RootSessionID string   `json:"rootSessionId"`
	Generation    string   `json:"generation"`
	SessionIDs    []string `json:"sessionIds"`
	Restorable    bool     `json:"restorable"`
}

// DeletedSession is host.DeletedSession as clients see it.
type DeletedSession struct {
	Session   Session   `json:"session"`
	Tombstone Tombstone `json:"tombstone"`
}

// PurgedTree is host.PurgedTree as clients see it.
type PurgedTree struct {
	WorkspaceID   string    `json:"workspace"`
	RootSessionID string    `json:"rootSessionId"`
	DeletedAt     time.Time `json:"deletedAt"`
	SessionIDs    []string  `json:"sessionIds"`
}

// PurgeCounts is host.PurgeCounts as clients see it.
type PurgeCounts struct {
	Sessions     int `json:"sessions"`
	Turns        int `json:"turns"`
	Messages     int `json:"messages"`
	Interactions int `json:"interactions"`
}

// GoalOperation is host.GoalOperation as clients see it.
type GoalOperation struct {
	WorkspaceID    string                  `json:"workspace"`
	ClientSubmitID string                  `json:"clientSubmitId"`
	ID             string                  `json:"id"`
	SessionID      string                  `json:"sessionId"`
	Action         string                  `json:"action"`
	Digest         string                  `json:"digest"`
	Spec           *GoalSpec               `json:"goal,omitempty"`
	Revision       int64                   `json:"revision"`
	State          host.GoalOperationState `json:"state"`
	Error          string                  `json:"error,omitempty"`
	By             string                  `json:"by,omitempty"`
	ByName         string                  `json:"byName,omitempty"`
	CreatedAt      time.Time               `json:"createdAt"`
	UpdatedAt      time.Time               `json:"updatedAt"`
}

// GoalProvenance is host.GoalProvenance as clients see it.
type GoalProvenance struct {
	Kind        string `json:"kind"`
	OperationID string `json:"operationId"`
	Revision    int64  `json:"revision"`
	Generation  int64  `json:"generation"`
	Number      int    `json:"number"`
}

// AttachmentRef is host.AttachmentRef as clients see it.
type AttachmentRef struct {
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	MediaType string `json:"mediaType,omitempty"`
	Size      int64  `json:"size,omitempty"`
}

// Quote is host.Quote as clients see it.
type Quote struct {
	MessageID string `json:"messageId,omitempty"`
	Text      string `json:"text"`
}

// ToolDiff is host.ToolDiff as clients see it.
type ToolDiff struct {
	Path    string  `json:"path"`
	OldText *string `json:"oldText,omitempty"`
	NewText string  `json:"newText"`
}

// GoalSpec is host.GoalSpec as clients see it.
type GoalSpec struct {
	Objective   string `json:"objective"`
	Criteria    string `json:"criteria,omitempty"`
	MaxTurns    int    `json:"maxTurns,omitempty"`
	MaxDuration string `json:"maxDuration,omitempty"`
}

// Tombstone is host.Tombstone as clients see it.
type Tombstone struct {
	DeletedAt     time.Time `json:"deletedAt"`
	Generation    string    `json:"generation,omitempty"`
	ComponentRoot string    `json:"componentRoot,omitempty"`
	DeletedBy     string    `json:"deletedBy,omitempty"`
	DeletedByName string    `json:"deletedByName,omitempty"`
	Restorable    bool      `json:"restorable"`
}
