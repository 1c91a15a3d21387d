package protocol

import (
	"net/http"
	"testing"
)

// Every domain error class maps onto a distinct wire code that keeps its
// retry semantics, and every wire code is reachable from the domain.
func TestErrorCodeMapping(t *testing.T) {
	seen := map[Code]bool{}
	for hc, wc := range hostCodes {
		if ErrorCode(hc) != wc || seen[wc] {
			t.Errorf("host code %q maps to %q (duplicate: %v)", hc, wc, seen[wc])
		}
		seen[wc] = true
		if hc.Retryable() != wc.Retryable() {
			t.Errorf("%q: host retryable %v, wire retryable %v", hc, hc.Retryable(), wc.Retryable())
		}
	}
	for _, c := range Codes {
		if !seen[c] {
			t.Errorf("wire code %q has no domain class", c)
		}
	}
	if ErrorCode("made_up") != CodeInternal {
		t.Error("an unknown domain class must be internal on the wire")
	}
	if CodeInternal.HTTPStatus() != http.StatusInternalServerError || CodeSessionBusy.HTTPStatus() != http.StatusConflict {
		t.Error("HTTP status mapping changed")
	}
}
