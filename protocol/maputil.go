package protocol

import "github.com/ensemble-dev/ensemble/host"

// mapSlice maps each element, keeping nil apart from empty: they encode
// differently (null and []).
func mapSlice[A, B any](in []A, f func(A) B) []B {
	if in == nil {
		return nil
	}
	out := make([]B, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// mapPtr maps the value behind p; nil stays nil.
func mapPtr[A, B any](p *A, f func(A) B) *B {
	if p == nil {
		return nil
	}
	v := f(*p)
	return &v
}

// mapMap maps each value; nil stays nil.
func mapMap[K comparable, A, B any](in map[K]A, f func(A) B) map[K]B {
	if in == nil {
		return nil
	}
	out := make(map[K]B, len(in))
	for k, v := range in {
		out[k] = f(v)
	}
	return out
}

// FromSessions maps a list of sessions (nil stays nil).
func FromSessions(s []host.Session) []Session { return mapSlice(s, FromSession) }

// FromTurns maps a list of turns (nil stays nil).
func FromTurns(s []host.Turn) []Turn { return mapSlice(s, FromTurn) }

// FromMessages maps a list of messages (nil stays nil).
func FromMessages(s []host.Message) []Message { return mapSlice(s, FromMessage) }

// FromInteractions maps a list of interactions (nil stays nil).
func FromInteractions(s []host.Interaction) []Interaction { return mapSlice(s, FromInteraction) }

// FromQueueEntries maps a list of queue entries (nil stays nil).
func FromQueueEntries(s []host.QueueEntry) []QueueEntry { return mapSlice(s, FromQueueEntry) }
