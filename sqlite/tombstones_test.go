package sqlite

import (
	"testing"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/storetest"
)

func TestTombstoneContract(t *testing.T) {
	storetest.RunTombstones(t, func(t *testing.T) host.Store { return openTemp(t) })
}
