package protocol

import (
	"slices"
	"testing"

	"github.com/ensemble-dev/ensemble/auth"
)

// The permission table and the protocol name the same operations: an
// operation without a role could never be authorized, a role without an
// operation is a name clients cannot learn from the protocol.
func TestOperationsMatchPermissions(t *testing.T) {
	got := slices.Sorted(slices.Values(Operations))
	want := slices.Sorted(slices.Values(auth.Operations()))
	if !slices.Equal(got, want) {
		t.Fatalf("protocol operations %v\nauth permission table %v", got, want)
	}
	if auth.KnownOperation(OpAuthRefresh) {
		t.Fatal("auth.refresh is a connection request, not a workspace operation")
	}
}
