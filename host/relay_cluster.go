package host

import (
	"context"
	"time"
)

// OutboxClaimer is part of Store. ClaimFacts is PendingFacts with a
// claim: the rows it returns are leased to the caller for lease, and a
// concurrent ClaimFacts (another replica's relay) skips them, so relays
// running on every replica republish each missed fact once rather than once
// per replica. A row not marked published before its lease ends is returned
// again (the claimer died or its publish failed).
type OutboxClaimer interface {
	ClaimFacts(ctx context.Context, before time.Time, limit int, lease time.Duration) ([]OutboxRow, error)
}

// relayLease is how long a relay owns the outbox rows it claimed: enough for
// one bounded publish and the mark that follows it.
const relayLease = 30 * time.Second

// pendingFacts fetches and claims rows for the relay.
func (h *Host) pendingFacts(ctx context.Context, before time.Time, limit int) ([]OutboxRow, error) {
	return h.store.ClaimFacts(ctx, before, limit, relayLease)
}

// flushPublished marks in the store the rows the post-commit fast path
// already delivered, whatever their age. Without it another replica's relay
// would find them pending once they are older than the relay delay and
// publish every fact a second time. On failure the ids stay remembered for
// the next round.
func (h *Host) flushPublished(ctx context.Context) error {
	ids := h.pub.takeDelivered()
	if len(ids) == 0 {
		return nil
	}
	if err := h.store.MarkPublished(ctx, ids); err != nil {
		h.pub.keepDelivered(ids)
		return err
	}
	return nil
}
