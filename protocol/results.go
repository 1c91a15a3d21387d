package protocol

// SessionResult answers session.get, session.update, session.fork and
// session.continueFresh.
type SessionResult struct {
	Session Session `json:"session"`
}

// TurnListResult answers turn.list: a page of turns and their interaction
// history, so paging back shows past approvals with who answered them.
type TurnListResult struct {
	TurnPage
	Interactions []Interaction `json:"interactions"`
}

// GoalGetResult answers goal.get: the goal (absent when none) and the
// session's goal state.
type GoalGetResult struct {
	Goal  *Goal     `json:"goal,omitempty"`
	State GoalState `json:"state"`
}

// QueueResult answers queue.get.
type QueueResult struct {
	Queue Queue `json:"queue"`
}

// UnsubscribeResult answers unsubscribe.
type UnsubscribeResult struct {
	Unsubscribed bool `json:"unsubscribed"`
}

// TypingResult answers presence.typing: an empty object.
type TypingResult struct{}
