package hub

import (
	"testing"

	"github.com/ensemble-dev/ensemble/protocol"
)

// conn.go names the superseded kind itself; it must stay the protocol's.
func TestSupersededIsTheProtocolKind(t *testing.T) {
	if KindSuperseded != protocol.KindSuperseded {
		t.Fatalf("hub superseded kind %q, protocol %q", KindSuperseded, protocol.KindSuperseded)
	}
}
