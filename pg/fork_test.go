package pg

import (
	"testing"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore/sqlstoretest"
)

// NewRuntimeForking implements conformance.Driver.
func (conformanceDriver) NewRuntimeForking(t *testing.T, mode host.ForkMode) host.Runtime {
	return sqlstoretest.RuntimeForking(t, mode)
}
