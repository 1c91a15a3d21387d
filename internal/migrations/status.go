// Package migrations holds what both stores' goose migration commands share:
// reading the status without creating goose's table, and printing it.
package migrations

import (
	"context"
	"fmt"
	"io"

	"github.com/pressly/goose/v3"
)

// Status lists every known migration. A database never migrated (no
// version table) is reported as all pending, because goose's own Status
// would create the table.
func Status(ctx context.Context, p *goose.Provider, migrated bool) ([]*goose.MigrationStatus, error) {
	if migrated {
		return p.Status(ctx)
	}
	var status []*goose.MigrationStatus
	for _, src := range p.ListSources() {
		status = append(status, &goose.MigrationStatus{Source: src, State: goose.StatePending})
	}
	return status, nil
}

// Write prints one line per migration: version, file, and whether (and
// when) it was applied. It is the output of `ensemble migrate status`.
func Write(w io.Writer, status []*goose.MigrationStatus) error {
	for _, st := range status {
		applied := "pending"
		if st.State == goose.StateApplied {
			applied = "applied " + st.AppliedAt.UTC().Format("2006-01-02 15:04:05Z")
		}
		if _, err := fmt.Fprintf(w, "%05d  %-24s %s\n", st.Source.Version, st.Source.Path, applied); err != nil {
			return err
		}
	}
	return nil
}
