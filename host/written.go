package host

import (
	"context"
	"time"
)

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

// AdvanceTurn and AdvanceSession write two columns of a row; a copy of it
// this transaction wrote before moves with them, so attach never carries
// a Turn or session older than the one committed.
func (w *writtenTx) AdvanceTurn(ctx context.Context, ws, sessionID, turnID string, seq int64, at time.Time) error {
	if err := w.Tx.AdvanceTurn(ctx, ws, sessionID, turnID, seq, at); err != nil {
		return err
	}
	for i := range w.turns {
		if t := &w.turns[i]; t.ID == turnID && t.SessionID == sessionID && t.WorkspaceID == ws {
			t.AppliedSeq, t.UpdatedAt = max(t.AppliedSeq, seq), at
		}
	}
	return nil
}

func (w *writtenTx) AdvanceSession(ctx context.Context, ws, id string, version int64, at time.Time) error {
	if err := w.Tx.AdvanceSession(ctx, ws, id, version, at); err != nil {
		return err
	}
	for i := range w.sessions {
		if s := &w.sessions[i]; s.ID == id && s.WorkspaceID == ws {
			s.MessageVersion, s.UpdatedAt = version, at
		}
	}
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
