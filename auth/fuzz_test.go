package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"testing"
	"unicode/utf8"
)

var fuzzSecret = []byte("fuzz-secret-fuzz-secret-fuzz-sec")

// checkVerified holds for every outcome of Verify: a typed error, or a
// principal within the documented bounds.
func checkVerified(t *testing.T, p Principal, err error) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, ErrInvalidToken) && !errors.Is(err, ErrExpired) {
			t.Fatalf("untyped error: %v", err)
		}
		return
	}
	if p.UserID == "" || len(p.UserID) > MaxSubjectLen || !utf8.ValidString(p.UserID) {
		t.Fatalf("bad user id %q", p.UserID)
	}
	if len(p.Name) > MaxNameLen || !utf8.ValidString(p.Name) {
		t.Fatalf("bad name %q", p.Name)
	}
	if len(p.Workspaces) > MaxWorkspaces {
		t.Fatalf("%d workspaces", len(p.Workspaces))
	}
	for ws, r := range p.Workspaces {
		if !validWorkspaceID(ws) || r < RoleViewer || r > RoleAdmin {
			t.Fatalf("bad membership %q → %d", ws, r)
		}
	}
}

// FuzzVerify feeds arbitrary strings to the token parser.
func FuzzVerify(f *testing.F) {
	v := NewHMAC(fuzzSecret, Options{})
	f.Fuzz(func(t *testing.T, token string) {
		p, _, err := v.Verify(token)
		checkVerified(t, p, err)
	})
}

// FuzzClaims signs arbitrary claim bytes with the right secret, so the
// claim validation and the principal mapping see hostile JSON.
func FuzzClaims(f *testing.F) {
	v := NewHMAC(fuzzSecret, Options{WorkspacesClaim: "org.workspaces"})
	f.Fuzz(func(t *testing.T, header, payload []byte) {
		enc := base64.RawURLEncoding
		signing := enc.EncodeToString(header) + "." + enc.EncodeToString(payload)
		mac := hmac.New(sha256.New, fuzzSecret)
		mac.Write([]byte(signing))
		p, _, err := v.Verify(signing + "." + enc.EncodeToString(mac.Sum(nil)))
		checkVerified(t, p, err)
	})
}
