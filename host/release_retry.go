package host

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Release retries: a deleted session's runtime that could not be released
// after the delete committed is released again by the reconciler, with
// exponential backoff. The queue is in memory on purpose: what a release
// frees (the agent connection, this epoch's lease) lives in this process,
// so a restart ends it anyway and leaves nothing durable to release.
const (
	releaseRetryMin      = time.Second
	releaseRetryMax      = 5 * time.Minute
	releaseRetryAttempts = 20 // ~1 h 15 min of retries, then given up loudly
)

type releaseKey struct{ ws, sid string }

type releaseRetry struct {
	attempts int
	next     time.Time
}

// releaseRetries is the set of pending releases; its zero value is ready.
type releaseRetries struct {
	mu      sync.Mutex
	pending map[releaseKey]releaseRetry
}

// add schedules the first retry; a session already pending keeps its
// backoff.
func (r *releaseRetries) add(now time.Time, ws, sid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[releaseKey]releaseRetry{}
	}
	k := releaseKey{ws, sid}
	if _, ok := r.pending[k]; !ok {
		r.pending[k] = releaseRetry{next: now.Add(releaseRetryMin)}
	}
}

// due lists the releases whose retry time has come, in a stable order.
func (r *releaseRetries) due(now time.Time) []releaseKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []releaseKey
	for k, v := range r.pending {
		if !v.next.After(now) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b releaseKey) int {
		return cmp.Or(cmp.Compare(a.ws, b.ws), cmp.Compare(a.sid, b.sid))
	})
	return out
}

// PendingReleases is how many deleted sessions' runtimes are still to be
// released (for health and tests).
func (h *Host) PendingReleases() int {
	h.releases.mu.Lock()
	defer h.releases.mu.Unlock()
	return len(h.releases.pending)
}

// errRestoredMeanwhile: the session is live again; its runtime is its own.
var errRestoredMeanwhile = errors.New("session restored before its runtime was released")

// RetryReleases runs every due release retry once and reports how many
// runtimes it released. The reconciler calls it every pass.
func (h *Host) RetryReleases(ctx context.Context) int {
	released := 0
	for _, k := range h.releases.due(h.now()) {
		if ctx.Err() != nil {
			return released
		}
		err := h.retryRelease(ctx, k.ws, k.sid)
		h.releases.mu.Lock()
		cur := h.releases.pending[k]
		switch {
		case err == nil:
			delete(h.releases.pending, k)
			released++
			h.log.Info("released a deleted session's runtime on retry", "session", k.sid, "attempts", cur.attempts+1)
		case errors.Is(err, errRestoredMeanwhile):
			delete(h.releases.pending, k)
		case cur.attempts+1 >= releaseRetryAttempts:
			delete(h.releases.pending, k)
			h.log.Error("gave up releasing a deleted session's runtime", "session", k.sid, "attempts", cur.attempts+1, "err", err)
		default:
			cur.attempts++
			back := min(releaseRetryMin<<min(cur.attempts, 16), releaseRetryMax)
			cur.next = h.now().Add(back)
			h.releases.pending[k] = cur
			h.log.Warn("release of a deleted session's runtime failed again", "session", k.sid, "attempts", cur.attempts, "retryIn", back, "err", err)
		}
		h.releases.mu.Unlock()
	}
	return released
}

// retryRelease releases the runtime of a session that is still deleted
// (or purged since), under the session lock so no submit of this process
// can start it again in between. A restored session keeps its runtime.
func (h *Host) retryRelease(ctx context.Context, ws, sid string) error {
	defer h.locks.lock(ws, sid)()
	s, err := h.store.GetSession(ctx, ws, sid)
	switch {
	case errors.Is(err, ErrNotFound):
		// Purged meanwhile: the runtime binding may still be live.
	case err != nil:
		return err
	case s.DeletedAt == nil:
		return errRestoredMeanwhile
	}
	return h.releaseRuntime(ctx, ws, sid)
}
