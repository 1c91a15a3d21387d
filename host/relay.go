package host

import (
	"context"
	"slices"
	"time"
)

// RunRelay republishes committed facts the post-commit fast path missed
// (observer down, process died between commit and publish) until ctx ends.
func (h *Host) RunRelay(ctx context.Context) {
	t := time.NewTicker(h.relay.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := h.RelayOnce(ctx); err != nil && ctx.Err() == nil {
				h.log.Warn("outbox relay", "err", err)
			}
		}
	}
}

// RelayOnce first records what the fast path delivered, then publishes
// outbox rows still pending after the relay delay and marks them published.
// Facts are hints carrying versions, so a duplicate is harmless.
func (h *Host) RelayOnce(ctx context.Context) error {
	h.FlushPublish()
	if err := h.flushPublished(ctx); err != nil {
		return err
	}
	for {
		rows, err := h.pendingFacts(ctx, h.now().Add(-h.relay.delay), 500)
		if err != nil || len(rows) == 0 {
			return err
		}
		// A row's facts share its id and come together: each row once.
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		ids = slices.Compact(ids)
		facts := h.pub.undelivered(rows)
		if h.pub.observer != nil && len(facts) > 0 {
			if err := h.pub.observer.Publish(ctx, dedupeFacts(facts)); err != nil {
				return err
			}
		}
		if err := h.store.MarkPublished(ctx, ids); err != nil {
			return err
		}
		if len(ids) < 500 { // the limit counts rows, not facts
			return nil
		}
	}
}
