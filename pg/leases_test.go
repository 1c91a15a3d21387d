package pg

import (
	"testing"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/storetest"
)

func TestLeaseContract(t *testing.T) {
	url, _ := testSchema(t)
	storetest.RunLeases(t, func(t *testing.T) host.Store { return openTest(t, url, Options{}) })
}
