package host

import "context"

// writtenTx remembers the last Turn and Session values a transaction wrote,
// so that commit can attach them to the transaction's turn facts: the
// published Turn is the committed one, never a guess, and the fast path and
// the relay publish the same outbox row.
type writtenTx struct {
	Tx
	turns    []Turn
	sessions []Session
}

func (w *writtenTx) InsertTurn(ctx context.Context, t Turn) error {
	if err := w.Tx.InsertTurn(ctx, t); err != nil {
		return err
	}
	w.turns = putWritten(w.turns, t, func(o Turn) bool { return o.ID == t.ID })
	return nil
}

func (w *writtenTx) UpdateTurn(ctx context.Context, t Turn) error {
	if err := w.Tx.UpdateTurn(ctx, t); err != nil {
		return err
	}
	w.turns = putWritten(w.turns, t, func(o Turn) bool { return o.ID == t.ID })
	return nil
}

func (w *writtenTx) InsertSession(ctx context.Context, s Session) error {
	if err := w.Tx.InsertSession(ctx, s); err != nil {
		return err
	}
	w.sessions = putWritten(w.sessions, s, func(o Session) bool { return o.ID == s.ID && o.WorkspaceID == s.WorkspaceID })
	return nil
}

func (w *writtenTx) UpdateSession(ctx context.Context, s Session) error {
	if err := w.Tx.UpdateSession(ctx, s); err != nil {
		return err
	}
	w.sessions = putWritten(w.sessions, s, func(o Session) bool { return o.ID == s.ID && o.WorkspaceID == s.WorkspaceID })
	return nil
}

// putWritten replaces the element is matches with v, or appends v.
func putWritten[T any](vs []T, v T, is func(T) bool) []T {
	for i := range vs {
		if is(vs[i]) {
			vs[i] = v
			return vs
		}
	}
	return append(vs, v)
}

// attach gives each turn fact the Turn as this transaction last wrote it,
// and the session when the transaction wrote that too. A turn fact whose
// Turn the transaction did not write stays a plain wake-up hint.
func (w *writtenTx) attach(facts []Fact) []Fact {
	for i := range facts {
		f := &facts[i]
		if !f.typed {
			continue
		}
		f.typed = false
		for j := range w.turns {
			if t := w.turns[j]; t.ID == f.TurnID && t.SessionID == f.SessionID && t.WorkspaceID == f.WorkspaceID {
				f.Turn = &t
				break
			}
		}
		if f.Turn == nil {
			continue
		}
		for j := range w.sessions {
			if s := w.sessions[j]; s.ID == f.SessionID && s.WorkspaceID == f.WorkspaceID {
				// Goal is read with a session, never written: consumers
				// keep the one they show.
				s.Goal = nil
				f.Session = &s
				break
			}
		}
	}
	return facts
}
