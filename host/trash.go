package host

import (
	"context"
	"slices"
)

// FactTrashChanged is committed with every delete, restore and purge
// (explicit or by retention): a workspace-level fact (no SessionID) whose
// Trash says which sessions entered or left the Trash. A purge changes no
// visible session, so without it nobody watching would ever hear of it.
const FactTrashChanged = "trash/changed"

// TrashChange is the payload of a FactTrashChanged fact: the ids each
// commit moved, every list sorted.
type TrashChange struct {
	Deleted  []string `json:"deleted,omitempty"`
	Restored []string `json:"restored,omitempty"`
	Purged   []string `json:"purged,omitempty"`
}

func trashFact(ws string, c TrashChange) Fact {
	for _, l := range [][]string{c.Deleted, c.Restored, c.Purged} {
		slices.Sort(l)
	}
	return Fact{WorkspaceID: ws, Kind: FactTrashChanged, Trash: &c}
}

// RestoreInput restores one deleted component by its topmost session.
type RestoreInput struct {
	WorkspaceID string
	SessionID   string
}

// RestoreResult is the restored topmost session and every session of its
// component. Restored is false when the session was already live (a
// retried restore).
type RestoreResult struct {
	Session            Session
	RestoredSessionIDs []string
	Restored           bool
}

// Reasons of a refused restore or purge.
const (
	ReasonNotTopmost    = "not_topmost"
	ReasonNotRestorable = "not_restorable"
	ReasonParentDeleted = "parent_deleted"
	ReasonNotDeleted    = "not_deleted"
)

// ListDeletedSessions pages the workspace's topmost tombstones (the Trash),
// newest first by (deletedAt, id). Legacy tombstones are listed with
// restorable false.
func (h *Host) ListDeletedSessions(ctx context.Context, ws string, q DeletedQuery) (DeletedPage, error) {
	if err := requireIDs(ws); err != nil {
		return DeletedPage{}, err
	}
	q.Limit = ClampLimit(q.Limit, 50, 200)
	p, err := h.store.ListDeleted(ctx, ws, q)
	if err != nil {
		return DeletedPage{}, storeErr(err, "list deleted sessions")
	}
	return p, nil
}

// RestoreDeletedSession restores the exact component whose topmost session
// is in.SessionID, atomically: every session of that deletion generation
// becomes visible again with its turns, messages, interactions and
// settings as they were. No agent is started or resumed; the next prompt
// does that.
func (h *Host) RestoreDeletedSession(ctx context.Context, in RestoreInput) (RestoreResult, error) {
	if err := requireIDs(in.WorkspaceID, in.SessionID); err != nil {
		return RestoreResult{}, err
	}
	ws := in.WorkspaceID
	var res RestoreResult
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		res = RestoreResult{RestoredSessionIDs: []string{}}
		s, err := tx.Session(ctx, ws, in.SessionID)
		if err != nil {
			return storeErr(err, "session %s", in.SessionID)
		}
		if s.Provisional {
			return Errorf(CodeNotFound, "session %s not found", in.SessionID)
		}
		if s.DeletedAt == nil {
			res.Session = s // already live: a retried restore
			return nil
		}
		tree, err := tx.SessionTree(ctx, ws, rootOf(s))
		if err != nil {
			return err
		}
		var self *TreeSession
		byID := map[string]TreeSession{}
		for i, ts := range tree {
			byID[ts.Session.ID] = ts
			if ts.Session.ID == s.ID {
				self = &tree[i]
			}
		}
		if self == nil || self.Tombstone == nil {
			return Errorf(CodeNotFound, "session %s not found", in.SessionID)
		}
		tb := *self.Tombstone
		if p, ok := byID[s.ParentID]; s.ParentID != "" && ok && p.Tombstone != nil {
			return &Error{Code: CodeOperationConflict, Reason: ReasonParentDeleted,
				Message: "the session's parent is deleted; restore the parent's component"}
		}
		if tb.Generation == "" || !tb.Restorable {
			return &Error{Code: CodeOperationConflict, Reason: ReasonNotRestorable,
				Message: "this deleted session cannot be restored (deleted before restore was lossless); it can only be purged"}
		}
		if tb.ComponentRoot != s.ID {
			return &Error{Code: CodeOperationConflict, Reason: ReasonNotTopmost,
				Message: "the session was deleted as part of another session's component; restore that one"}
		}
		for _, ts := range tree {
			if ts.Tombstone != nil && ts.Tombstone.Generation == tb.Generation {
				res.RestoredSessionIDs = append(res.RestoredSessionIDs, ts.Session.ID)
				emit(Fact{WorkspaceID: ws, Kind: FactSessionChanged, SessionID: ts.Session.ID})
			}
		}
		if err := tx.SetTombstone(ctx, ws, res.RestoredSessionIDs, nil); err != nil {
			return err
		}
		emit(Fact{WorkspaceID: ws, Kind: FactInteractionTreeDirty, SessionID: rootOf(s)},
			trashFact(ws, TrashChange{Restored: slices.Clone(res.RestoredSessionIDs)}))
		s.DeletedAt = nil
		res.Session, res.Restored = s, true
		return nil
	})
	if err != nil {
		return RestoreResult{}, storeErr(err, "restore session %s", in.SessionID)
	}
	return res, nil
}
