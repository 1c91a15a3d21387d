package host

import (
	"context"
	"errors"
	"sync"
	"time"
)

// DefaultLeaseTTL is how long a session lease lasts without renewal: how
// long a dead replica's sessions wait before another replica takes them
// over. Leases are renewed every third of it.
const DefaultLeaseTTL = 10 * time.Second

// minLeaseTTL bounds Config.Cluster.LeaseTTL from below: leases are
// renewed every third of it, and a store round trip must fit in that.
const minLeaseTTL = 100 * time.Millisecond

// ClusterConfig turns on session ownership and cross-replica routing
// (Config.Cluster). The Forwarder is required: leases are taken only where
// commands can reach the owner. LeaseTTL 0 means DefaultLeaseTTL.
type ClusterConfig struct {
	Forwarder Forwarder
	LeaseTTL  time.Duration
}

// ownership is the Host's view of the session leases it holds. fwd and ttl
// are fixed at construction; mu guards held.
type ownership struct {
	fwd Forwarder
	ttl time.Duration

	mu   sync.Mutex
	held map[string]heldLease // by ws + "/" + session id
}

type heldLease struct {
	ws, sid string
	gen     int64
}

func (o *ownership) leaseTTL() time.Duration { return o.ttl }

func (o *ownership) forwarder() Forwarder { return o.fwd }

func (o *ownership) hold(ws, sid string, gen int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held == nil {
		o.held = map[string]heldLease{}
	}
	o.held[ws+"/"+sid] = heldLease{ws: ws, sid: sid, gen: gen}
}

func (o *ownership) generation(ws, sid string) (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	l, ok := o.held[ws+"/"+sid]
	return l.gen, ok
}

func (o *ownership) drop(ws, sid string, gen int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l, ok := o.held[ws+"/"+sid]; ok && l.gen == gen {
		delete(o.held, ws+"/"+sid)
	}
}

func (o *ownership) snapshot() []heldLease {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]heldLease, 0, len(o.held))
	for _, l := range o.held {
		out = append(out, l)
	}
	return out
}

// leases returns the store's lease port when ownership is on (cluster
// mode); otherwise nil, and every session is this Host's.
func (h *Host) leases() LeaseStore {
	if h.own.forwarder() == nil {
		return nil
	}
	return h.store
}

// Owner reports which Host epoch owns the session's runtime ("" if none).
func (h *Host) Owner(ctx context.Context, ws, sessionID string) (string, error) {
	ls := h.leases()
	if ls == nil {
		return h.epoch, nil
	}
	l, err := ls.GetLease(ctx, ws, sessionID)
	if errors.Is(err, ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", storeErr(err, "session lease")
	}
	return l.Owner, nil
}

type forwardedKey struct{}

func isForwarded(ctx context.Context) bool { return ctx.Value(forwardedKey{}) != nil }

// ownSession makes sure this Host owns the session's runtime before it
// acts on it, or names the owner to forward to. A lease that expired (its
// owner died) is taken over, and the session's recovery runs first: every
// unsettled Turn but keepTurn (the one being dispatched now) ran on the
// dead owner and is settled failed/execution_status_unknown.
func (h *Host) ownSession(ctx context.Context, ws, sid, keepTurn string) (owner string, mine bool, err error) {
	ls := h.leases()
	if ls == nil {
		return h.epoch, true, nil
	}
	ttl := h.own.leaseTTL()
	cur, err := ls.GetLease(ctx, ws, sid)
	switch {
	case err == nil && cur.Owner == h.epoch && cur.Live:
		h.own.hold(ws, sid, cur.Generation)
		return h.epoch, true, nil
	case err == nil && cur.Owner != h.epoch && cur.Live:
		return cur.Owner, false, nil
	case err != nil && !errors.Is(err, ErrNotFound):
		return "", false, storeErr(err, "session lease")
	}
	// No lease for a session that does not exist: the command itself
	// answers not_found.
	if _, err := h.store.GetSession(ctx, ws, sid); errors.Is(err, ErrNotFound) {
		return h.epoch, true, nil
	} else if err != nil {
		return "", false, storeErr(err, "session %s", sid)
	}
	l, err := ls.AcquireLease(ctx, ws, sid, h.epoch, ttl)
	if err != nil {
		return "", false, storeErr(err, "session lease")
	}
	if l.Owner != h.epoch {
		return l.Owner, false, nil // another replica won the race
	}
	h.own.hold(ws, sid, l.Generation)
	if l.TookOver != "" {
		h.log.Info("took a session over from an expired owner", "session", sid, "previousOwner", l.TookOver, "generation", l.Generation)
		if err := h.recoverSession(ctx, ws, sid, keepTurn); err != nil {
			return "", false, err
		}
	}
	return h.epoch, true, nil
}

// recoverSession settles every unsettled Turn of one session except keep:
// they ran on an owner that is gone, so their outcome is unknown.
func (h *Host) recoverSession(ctx context.Context, ws, sid, keep string) error {
	turns, _, err := h.store.UnsettledTurns(ctx)
	if err != nil {
		return storeErr(err, "session recovery")
	}
	for _, t := range turns {
		if t.WorkspaceID != ws || t.SessionID != sid || t.ID == keep || t.Phase == PhaseQueued {
			continue // a queued Turn was never sent: the reconciler dispatches it
		}
		ref := TurnRef{WorkspaceID: ws, SessionID: sid, TurnID: t.ID}
		if _, err := h.settle(ctx, ref, Terminal{Outcome: OutcomeFailed, Reason: ReasonExecutionStatusUnknown}, ""); err != nil {
			return storeErr(err, "session recovery")
		}
		h.log.Info("settled a turn of a dead owner", "turn", t.ID, "reason", ReasonExecutionStatusUnknown)
	}
	return nil
}

// checkOwner is the fence inside a transaction: a write that depends on
// owning the session's runtime fails when another replica took it over.
func (h *Host) checkOwner(ctx context.Context, tx Tx, ws, sid string) error {
	if h.leases() == nil {
		return nil
	}
	gen, held := h.own.generation(ws, sid)
	err := ErrLeaseLost
	if held {
		err = tx.CheckLease(ctx, ws, sid, h.epoch, gen)
	}
	return staleOwner(err)
}

// staleOwner reports a lost lease as the typed error callers see. A store
// may check the fence with the transaction's next statement, so the loss
// can also surface from that call or the commit (Host.commit maps it).
func staleOwner(err error) error {
	var typed *Error
	if err == nil || !errors.Is(err, ErrLeaseLost) || errors.As(err, &typed) {
		return err
	}
	return &Error{Code: CodeUnavailable, Reason: "stale_owner", Err: err,
		Message: "this replica no longer owns the session; another replica took it over"}
}

// fencedTurn is the preamble of every write that depends on owning ref's
// session: inside tx, checkOwner, then the Turn.
func (h *Host) fencedTurn(ctx context.Context, tx Tx, ref TurnRef) (Turn, error) {
	if err := h.checkOwner(ctx, tx, ref.WorkspaceID, ref.SessionID); err != nil {
		return Turn{}, err // fenced: another replica took the session over
	}
	return tx.Turn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID)
}

// ownedElsewhere tells startup recovery to leave a Turn alone: in a
// cluster, its session is owned by a live replica, or it is so young that
// its session's owner may be acquiring the lease right now.
func (h *Host) ownedElsewhere(ctx context.Context, t Turn) bool {
	ls := h.leases()
	if ls == nil {
		return false
	}
	l, err := ls.GetLease(ctx, t.WorkspaceID, t.SessionID)
	if errors.Is(err, ErrNotFound) {
		return h.now().Sub(t.UpdatedAt) < h.own.leaseTTL()
	}
	if err != nil {
		return true // cannot tell: leave it to the orphan scan
	}
	return l.Live && l.Owner != h.epoch
}

// RunOwnership renews this Host's session leases until ctx ends, then
// releases them so other replicas can take over at once. A lease found
// taken over closes the local runtime of that session. In a cluster it
// also adopts sessions whose owner died: an unsettled Turn whose lease
// expired is taken over and recovered without waiting for a command.
func (h *Host) RunOwnership(ctx context.Context) {
	ls := h.leases()
	if ls == nil {
		<-ctx.Done()
		return
	}
	ttl := h.own.leaseTTL()
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			h.releaseAll(ls)
			return
		case <-t.C:
		}
		h.renewAll(ctx, ls, ttl)
		if n%2 == 0 {
			h.adoptOrphans(ctx)
		}
	}
}

func (h *Host) renewAll(ctx context.Context, ls LeaseStore, ttl time.Duration) {
	for _, l := range h.own.snapshot() {
		err := ls.RenewLease(ctx, l.ws, l.sid, h.epoch, l.gen, ttl)
		switch {
		case errors.Is(err, ErrLeaseLost):
			h.own.drop(l.ws, l.sid, l.gen)
			h.log.Warn("lost a session lease to another replica; closing its runtime here", "session", l.sid)
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = h.runtime.Release(cctx, l.ws, l.sid) // never destroys: the new owner loads it
			cancel()
		case err != nil && ctx.Err() == nil:
			h.log.Warn("renew session lease", "session", l.sid, "err", err)
		}
	}
}

func (h *Host) adoptOrphans(ctx context.Context) {
	turns, _, err := h.store.UnsettledTurns(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("orphan scan", "err", err)
		}
		return
	}
	seen := map[string]bool{}
	for _, t := range turns {
		key := t.WorkspaceID + "/" + t.SessionID
		if seen[key] || ctx.Err() != nil {
			continue
		}
		seen[key] = true
		if _, held := h.own.generation(t.WorkspaceID, t.SessionID); held || h.ownedElsewhere(ctx, t) {
			continue
		}
		unlock := h.locks.lock(t.WorkspaceID, t.SessionID)
		_, _, err := h.ownSession(ctx, t.WorkspaceID, t.SessionID, "")
		unlock()
		if err != nil && ctx.Err() == nil {
			h.log.Warn("adopt session of a dead owner", "session", t.SessionID, "err", err)
		}
	}
}

func (h *Host) releaseAll(ls LeaseStore) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, l := range h.own.snapshot() {
		if err := ls.ReleaseLease(ctx, l.ws, l.sid, h.epoch, l.gen); err != nil {
			h.log.Warn("release session lease", "session", l.sid, "err", err)
		}
		h.own.drop(l.ws, l.sid, l.gen)
	}
}

// HeldLeases reports how many session leases this Host holds (metrics).
func (h *Host) HeldLeases() int {
	h.own.mu.Lock()
	defer h.own.mu.Unlock()
	return len(h.own.held)
}

// runsElsewhere reports, in cluster mode, that a live replica other than
// this one owns the session's runtime: work that needs that runtime (such
// as delivering an interaction answer) is left to the owner's worker. When
// the lease cannot be read it also says yes, so the work waits a round
// rather than going to a runtime that may not hold the session.
func (h *Host) runsElsewhere(ctx context.Context, ws, sid string) bool {
	ls := h.leases()
	if ls == nil {
		return false
	}
	l, err := ls.GetLease(ctx, ws, sid)
	if errors.Is(err, ErrNotFound) {
		return false
	}
	return err != nil || (l.Live && l.Owner != h.epoch)
}
