package pg

import (
	"testing"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/storetest"
)

func TestStoreContract(t *testing.T) {
	url, _ := testSchema(t)
	storetest.Run(t, func(t *testing.T) host.Store { return openTest(t, url, Options{}) })
}
