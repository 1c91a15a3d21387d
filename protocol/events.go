package protocol

import (
	"time"
)

// Event kinds: the "kind" of an event frame. Clients ignore kinds they do
// not know.
const (
	KindSessionSummary = "session_summary"
	KindSessionRemoved = "session_removed"
	KindTurnUpdate     = "turn_update"
	KindMessageUpdate  = "message_update"
	KindMessageDelta   = "message_delta"
	// KindInteractionSnapshot is the complete interaction state of one
	// execution tree for one exact root turn.
	KindInteractionSnapshot = "interaction_snapshot"
	// KindTrashChanged is pushed to a workspace's watchers on every
	// committed delete, restore and purge (explicit or by retention).
	KindTrashChanged = "trash_changed"
	// KindGoalState carries the complete GoalState on every change
	// of a session's public goal projection.
	KindGoalState = "goal_state"
	// KindQueue is the complete queue of one session.
	KindQueue = "queue"
	// KindPresence is the event kind carrying a topic's merged presence.
	KindPresence = "presence"
	// KindSuperseded replaces events a lagging watcher can no longer get:
	// resubscribe for a snapshot.
	KindSuperseded = "superseded"
)

// Kinds lists every event kind.
var Kinds = []string{
	KindSessionSummary, KindSessionRemoved, KindTrashChanged, KindTurnUpdate,
	KindMessageUpdate, KindMessageDelta, KindInteractionSnapshot, KindGoalState,
	KindQueue, KindPresence, KindSuperseded,
}

// InteractionSnapshot is the payload of interaction_snapshot and the
// interactionTree of a session snapshot: every interaction of the tree's
// root turn (TurnID) and of each sub-agent session's latest turn. An empty
// list clears that root turn only.
type InteractionSnapshot struct {
	RootSessionID string        `json:"rootSessionId"`
	TurnID        string        `json:"turnId"`
	Interactions  []Interaction `json:"interactions"`
}

// SessionSummary is the payload of session_summary.
type SessionSummary struct {
	Session Session `json:"session"`
}

// SessionRemoved is the payload of session_removed: the session is no
// longer visible (deleted).
type SessionRemoved struct {
	Workspace string `json:"workspace"`
	SessionID string `json:"sessionId"`
}

// TurnUpdate is the payload of turn_update: the complete turn.
type TurnUpdate struct {
	Turn Turn `json:"turn"`
}

// MessageUpdate is the payload of message_update: the complete message.
type MessageUpdate struct {
	Message Message `json:"message"`
}

// MessageDelta is the payload of message_delta: Text was appended to the
// message's content.text at Offset, counted in UTF-16 code units (the unit
// JavaScript strings index by). Version and UpdatedAt are the message's new
// version and change time. A client at a message version at or above
// Version drops the event; otherwise the message text becomes its first
// Offset units followed by Text, which is also right when the client holds
// a longer prefix of the same streamed text (after a resume).
type MessageDelta struct {
	SessionID string    `json:"sessionId"`
	TurnID    string    `json:"turnId"`
	MessageID string    `json:"messageId"`
	Offset    int       `json:"offset"`
	Text      string    `json:"text"`
	Version   int64     `json:"version"`
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
	// Done: this append ended the message's streaming (streaming:false).
	// Only ensemble.v2 connections get it; an ensemble.v1 connection gets
	// the complete message_update at the same seq instead.
	Done bool `json:"done,omitempty"`
}

// TrashChanged is the payload of trash_changed: the ids that entered
// (deleted), left alive (restored) or left for good (purged) the Trash in
// one commit. It may be delivered more than once; applying it twice is
// harmless.
type TrashChanged struct {
	Workspace string   `json:"workspace"`
	Deleted   []string `json:"deleted"`
	Restored  []string `json:"restored"`
	Purged    []string `json:"purged"`
}

// QueueState is the payload of a queue event and the queue of a session
// snapshot: the revision, the stop fence and the waiting entries in order.
type QueueState struct {
	SessionID   string       `json:"sessionId"`
	Revision    int64        `json:"revision"`
	FenceTurnID string       `json:"fenceTurnId,omitempty"`
	Entries     []QueueEntry `json:"entries"`
	// Steering: the session's agent takes steering ("Steer now").
	Steering bool `json:"steering"`
}

// Watcher is one person in a presence list: their connections merged
// (earliest since; typing if any connection types; every replica).
type Watcher struct {
	UserID   string    `json:"userId"`
	Name     string    `json:"name,omitempty"`
	Since    time.Time `json:"since"`
	Typing   bool      `json:"typing"` // session topics only
	Replicas []string  `json:"replicas"`
	// Sessions lists the sessions this person watches (workspace topic only).
	Sessions []string `json:"sessions,omitempty"`
}

// Presence is the payload of a presence event and the presence field of a
// snapshot: everyone on the topic, ordered by arrival.
type Presence struct {
	SessionID string    `json:"sessionId,omitempty"`
	Watchers  []Watcher `json:"watchers"`
}

// SessionSnapshot is the snapshot of a session topic: the session, its
// newest turns (newest first) and its newest messages (ascending by
// version). MessagesHasMore: older messages exist; page them with
// message.list beforeVersion = the smallest version here.
type SessionSnapshot struct {
	Session         Session   `json:"session"`
	Turns           []Turn    `json:"turns"`
	TurnsHasMore    bool      `json:"turnsHasMore"`
	Messages        []Message `json:"messages"`
	MessagesHasMore bool      `json:"messagesHasMore"`
	// InteractionTree is the session's execution tree (absent only
	// before the hub first read it).
	InteractionTree *InteractionSnapshot `json:"interactionTree,omitempty"`
	// Interactions is the durable history of the snapshot's turns (every
	// state, with who answered what), so a reload shows past approvals.
	Interactions []Interaction `json:"interactions"`
	// Presence is who watches the session right now.
	Presence Presence `json:"presence"`
	// Agent is what the server's agent attests now (fork capability),
	// fresher than the ready frame's when the agent connected since.
	Agent *AgentInfo `json:"agent,omitempty"`
	// Goal is the session's goal state (absent: it never had one).
	Goal *GoalState `json:"goal,omitempty"`
	// Queue is the session's message queue (absent when the server keeps
	// none): steering and follow-ups waiting, in order.
	Queue *QueueState `json:"queue,omitempty"`
}

// WorkspaceSnapshot is the snapshot of a workspace topic: the first page of
// sessions, newest first.
type WorkspaceSnapshot struct {
	Sessions   []Session `json:"sessions"`
	NextCursor string    `json:"nextCursor,omitempty"`
	// Presence is who is connected to the workspace right now.
	Presence Presence `json:"presence"`
}
