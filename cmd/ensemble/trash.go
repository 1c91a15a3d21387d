package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// trashConfig is background trash retention (issue 14).
type trashConfig struct {
	retention, interval time.Duration
}

func trashFlags(f *flags) func() (trashConfig, error) {
	retention := f.duration("trash-retention", "ENSEMBLE_TRASH_RETENTION", host.DefaultTrashRetention,
		"how long a deleted session stays restorable in the Trash before it is purged for good (0: never purge automatically)")
	interval := f.duration("trash-purge-interval", "ENSEMBLE_TRASH_PURGE_INTERVAL", time.Hour,
		"how often retention looks for expired deleted sessions (one replica at a time)")
	return func() (trashConfig, error) {
		c := trashConfig{retention: *retention, interval: *interval}
		if c.retention < 0 {
			return c, fmt.Errorf("--trash-retention must not be negative")
		}
		if c.interval <= 0 {
			return c, fmt.Errorf("--trash-purge-interval must be positive")
		}
		return c, nil
	}
}

// runRetention starts trash retention; the returned channel closes when
// it stopped (after ctx ends).
func runRetention(ctx context.Context, h *host.Host, c trashConfig) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.RunRetention(ctx, c.retention, c.interval)
	}()
	return done
}
