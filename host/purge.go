package host

import (
	"context"
	"errors"
	"slices"
	"time"
)

// PurgeInput permanently removes chosen topmost deleted components.
type PurgeInput struct {
	WorkspaceID string
	SessionIDs  []string
}

// PurgedTree is the content-free descriptor of one removed tree.
type PurgedTree struct {
	WorkspaceID   string
	RootSessionID string
	DeletedAt     time.Time
	SessionIDs    []string
}

// PurgeResult reports what a purge removed: per tree descriptors and
// aggregate counts. Kept lists chosen or candidate sessions left in place
// (already gone, restored meanwhile, or holding a live or too-new member).
type PurgeResult struct {
	Purged []PurgedTree
	Kept   []string
	Counts PurgeCounts
}

// PurgeLocker is part of Store: retention runs on the replica holding the
// lock, one at a time. ok false: another replica holds it now.
type PurgeLocker interface {
	TryPurgeLock(ctx context.Context) (release func(), ok bool, err error)
}

// DefaultTrashRetention is how long a deleted session stays restorable
// before background retention purges it.
const DefaultTrashRetention = 30 * 24 * time.Hour

// retentionBatch bounds one page of retention candidates; each tree is
// still removed in one transaction, however large.
const retentionBatch = 100

// PurgeDeletedSessionTrees permanently removes the chosen topmost
// components. Each is fenced by the deletedAt read before its transaction,
// so one restored (or deleted again) meanwhile is kept. An id with no row
// (never there, another workspace's, or purged already) is not_found and
// nothing is purged.
func (h *Host) PurgeDeletedSessionTrees(ctx context.Context, in PurgeInput) (PurgeResult, error) {
	if err := requireIDs(in.WorkspaceID); err != nil {
		return PurgeResult{}, err
	}
	if len(in.SessionIDs) == 0 || len(in.SessionIDs) > MaxDeleteBatch {
		return PurgeResult{}, Errorf(CodeInvalidInput, "give 1 to %d session ids", MaxDeleteBatch)
	}
	if err := requireIDs(in.SessionIDs...); err != nil {
		return PurgeResult{}, err
	}
	ws := in.WorkspaceID
	ids := slices.Compact(slices.Sorted(slices.Values(in.SessionIDs)))
	fences := map[string]time.Time{}
	for _, id := range ids {
		s, err := h.store.GetSession(ctx, ws, id)
		if errors.Is(err, ErrNotFound) || err == nil && s.Provisional {
			return PurgeResult{}, Errorf(CodeNotFound, "session %s not found", id)
		}
		if err != nil {
			return PurgeResult{}, storeErr(err, "session %s", id)
		}
		if s.DeletedAt == nil {
			return PurgeResult{}, &Error{Code: CodeOperationConflict, Reason: ReasonNotDeleted,
				Message: "only deleted sessions can be purged; delete it first"}
		}
		fences[id] = *s.DeletedAt
	}
	res := PurgeResult{Purged: []PurgedTree{}, Kept: []string{}}
	for _, id := range ids {
		fence, ok := fences[id]
		if !ok {
			continue
		}
		tree, counts, err := h.purgeTree(ctx, ws, id, fence, nil)
		if err != nil {
			var he *Error
			if errors.As(err, &he) && he.Code == CodeOperationConflict {
				return res, err
			}
			return res, storeErr(err, "purge session %s", id)
		}
		if tree == nil {
			res.Kept = append(res.Kept, id)
			continue
		}
		res.Purged = append(res.Purged, *tree)
		res.Counts.add(counts)
	}
	return res, nil
}

// purgeTree removes the topmost tombstone id with its complete descendant
// tree in one transaction, if its deletedAt still equals fence, it is
// still topmost, and no member is live or (with a cutoff) deleted after
// cutoff. A nil tree means it was kept.
func (h *Host) purgeTree(ctx context.Context, ws, id string, fence time.Time, cutoff *time.Time) (*PurgedTree, PurgeCounts, error) {
	var (
		out    *PurgedTree
		counts PurgeCounts
	)
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		out, counts = nil, PurgeCounts{}
		s, err := tx.Session(ctx, ws, id)
		if errors.Is(err, ErrNotFound) {
			return nil // purged already: idempotent
		}
		if err != nil {
			return err
		}
		if s.DeletedAt == nil || !s.DeletedAt.Equal(fence) {
			return nil // restored or deleted again meanwhile: the fence keeps it
		}
		tree, err := tx.SessionTree(ctx, ws, rootOf(s))
		if err != nil {
			return err
		}
		byID := map[string]TreeSession{}
		children := map[string][]string{}
		for _, ts := range tree {
			byID[ts.Session.ID] = ts
			if ts.Session.ParentID != "" {
				children[ts.Session.ParentID] = append(children[ts.Session.ParentID], ts.Session.ID)
			}
		}
		if p, ok := byID[s.ParentID]; s.ParentID != "" && ok && p.Tombstone != nil {
			if cutoff == nil {
				return &Error{Code: CodeOperationConflict, Reason: ReasonNotTopmost,
					Message: "the session is part of a larger deleted component; purge its topmost session"}
			}
			return nil
		}
		members := []string{id}
		for i := 0; i < len(members); i++ {
			members = append(members, children[members[i]]...)
		}
		for _, m := range members {
			ts := byID[m]
			if ts.Tombstone == nil {
				return nil // a live member keeps the whole tree
			}
			if cutoff != nil && ts.Tombstone.DeletedAt.After(*cutoff) {
				return nil // a too-new member keeps the whole tree
			}
		}
		slices.Sort(members)
		if counts, err = tx.PurgeSessions(ctx, ws, members); err != nil {
			return err
		}
		for _, m := range members {
			emit(Fact{WorkspaceID: ws, Kind: FactSessionChanged, SessionID: m})
		}
		emit(trashFact(ws, TrashChange{Purged: slices.Clone(members)}))
		out = &PurgedTree{WorkspaceID: ws, RootSessionID: id, DeletedAt: fence, SessionIDs: members}
		return nil
	})
	if err != nil {
		return nil, PurgeCounts{}, err
	}
	return out, counts, nil
}

// PurgeExpired removes every topmost deleted tree of every workspace whose
// members were all deleted at least retention ago, in bounded pages of
// candidates, one transaction per tree. A kept tree never blocks the ones
// after it: the scan moves on past it.
func (h *Host) PurgeExpired(ctx context.Context, retention time.Duration) (PurgeResult, error) {
	res := PurgeResult{Purged: []PurgedTree{}, Kept: []string{}}
	if retention <= 0 {
		return res, Errorf(CodeInvalidInput, "retention must be positive")
	}
	cutoff := h.nowUTC().Add(-retention)
	var after PurgeCandidate
	for {
		cands, err := h.store.PurgeCandidates(ctx, cutoff, after, retentionBatch)
		if err != nil {
			return res, storeErr(err, "purge candidates")
		}
		for _, c := range cands {
			tree, counts, err := h.purgeTree(ctx, c.WorkspaceID, c.SessionID, c.DeletedAt, &cutoff)
			if err != nil {
				return res, storeErr(err, "purge session %s", c.SessionID)
			}
			if tree == nil {
				res.Kept = append(res.Kept, c.SessionID)
				continue
			}
			res.Purged = append(res.Purged, *tree)
			res.Counts.add(counts)
		}
		if len(cands) < retentionBatch || ctx.Err() != nil {
			return res, ctx.Err()
		}
		after = cands[len(cands)-1]
	}
}

// RunRetention purges expired trash every interval until ctx ends. On a
// shared store only the replica holding the purge lock runs a pass; the
// per-tree fence makes a concurrent pass harmless anyway.
func (h *Host) RunRetention(ctx context.Context, retention, interval time.Duration) {
	if retention <= 0 {
		return
	}
	if interval <= 0 {
		interval = time.Hour
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		h.retentionPass(ctx, retention)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (h *Host) retentionPass(ctx context.Context, retention time.Duration) {
	release, held, err := h.store.TryPurgeLock(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("trash retention: purge lock", "err", err)
		}
		return
	}
	if !held {
		return // another replica runs this pass
	}
	defer release()
	res, err := h.PurgeExpired(ctx, retention)
	if err != nil && ctx.Err() == nil {
		h.log.Warn("trash retention", "err", err)
	}
	if len(res.Purged) > 0 {
		h.log.Info("trash retention purged deleted sessions", "trees", len(res.Purged),
			"sessions", res.Counts.Sessions, "messages", res.Counts.Messages)
	}
}
