package sqlite

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/storetest"
)

func TestLeaseContract(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	storetest.RunLeases(t, func(t *testing.T) host.Store {
		st, err := Open(context.Background(), path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}
