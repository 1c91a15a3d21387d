package pg

import (
	"context"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/storetest"
)

func TestTombstoneContract(t *testing.T) {
	url, _ := testSchema(t)
	storetest.RunTombstones(t, func(t *testing.T) host.Store { return openTest(t, url, Options{}) })
}

// Two stores (two replicas) cannot both hold the purge lock; once the
// holder releases it the other can take it.
func TestPurgeLockOneReplicaAtATime(t *testing.T) {
	url, _ := testSchema(t)
	a, b := openTest(t, url, Options{}), openTest(t, url, Options{})
	ctx := context.Background()
	release, ok, err := a.TryPurgeLock(ctx)
	if err != nil || !ok {
		t.Fatalf("first lock: ok=%v err=%v", ok, err)
	}
	if _, ok, err := b.TryPurgeLock(ctx); err != nil || ok {
		t.Fatalf("second replica took the held purge lock: ok=%v err=%v", ok, err)
	}
	release()
	release2, ok, err := b.TryPurgeLock(ctx)
	if err != nil || !ok {
		t.Fatalf("lock after release: ok=%v err=%v", ok, err)
	}
	release2()
}
