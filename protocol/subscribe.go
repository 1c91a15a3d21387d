package protocol

// Resume is the position a reconnecting client last saw on one replica.
type Resume struct {
	Epoch string `json:"epoch"`
	Seq   int64  `json:"seq"`
}

// Position is a durable session stream position: the stream epoch names
// the session's message history and Version is a canonical message
// version, so the same position means the same state on every replica. A
// client resumes from it on any replica; only another epoch (history
// rewritten) or a position older than the replica's window and the store
// catch-up bound gives a snapshot.
type Position struct {
	Epoch   string `json:"epoch"`
	Version int64  `json:"version"`
}

// SessionChanges is what a recovery from a position carries besides the
// replayed events: the current session and turn window, the execution
// tree's interactions, presence, goal and queue (latest-wins state the
// position does not order: another replica emitted their events in
// another order, or while the client was away) and, when the missed
// messages are not replayed as events, every message changed after the
// position, complete.
type SessionChanges struct {
	Session         Session              `json:"session"`
	Turns           []Turn               `json:"turns"`
	Messages        []Message            `json:"messages"`
	InteractionTree *InteractionSnapshot `json:"interactionTree,omitempty"`
	Presence        *Presence            `json:"presence,omitempty"`
	Goal            *GoalState           `json:"goal,omitempty"`
	Queue           *QueueState          `json:"queue,omitempty"`
}

// SubscribeResult answers subscribe. Recovered: the client's state is
// brought forward by Changes (when set) and by the events with seq above
// Seq that follow. Otherwise Snapshot (SessionSnapshot or
// WorkspaceSnapshot) is the complete current state and events with seq
// above Seq follow. Position (session topics) is the durable stream
// position the result leaves the client at, when it is one.
type SubscribeResult struct {
	Sub       string          `json:"sub"`
	Epoch     string          `json:"epoch"`
	Seq       int64           `json:"seq"`
	Recovered bool            `json:"recovered"`
	Position  *Position       `json:"position,omitempty"`
	Changes   *SessionChanges `json:"changes,omitempty"`
	Snapshot  any             `json:"snapshot,omitempty"`
}
