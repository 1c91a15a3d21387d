package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

func TestAllowedTable(t *testing.T) {
	reads := []string{"session.get", "session.list", "session.listDeleted", "turn.list", "message.list", "goal.get", "queue.get", "subscribe", "unsubscribe"}
	writes := []string{"session.create", "session.update", "session.continueFresh", "session.fork", "session.delete", "session.restore",
		"turn.message.submit", "queue.retract", "turn.interrupt", "turn.cancel", "interaction.respond", "goal.control", "presence.typing"}
	admin := []string{"session.purge", "session.export", "session.import"}
	check := func(r Role, ops []string, want bool) {
		t.Helper()
		for _, op := range ops {
			if got := Allowed(r, op); got != want {
				t.Errorf("Allowed(%s, %s) = %v, want %v", r, op, got, want)
			}
		}
	}
	check(RoleViewer, reads, true)
	check(RoleViewer, writes, false)
	check(RoleViewer, admin, false)
	check(RoleMember, reads, true)
	check(RoleMember, writes, true)
	check(RoleMember, admin, false)
	check(RoleAdmin, reads, true)
	check(RoleAdmin, writes, true)
	check(RoleAdmin, admin, true)
	check(RoleNone, reads, false)
	check(RoleAdmin, []string{"session.nuke", "", "Session.Get"}, false)
	if n := len(Operations()); n != len(reads)+len(writes)+len(admin) {
		t.Errorf("table has %d operations", n)
	}
}

func TestRoleJSON(t *testing.T) {
	p := Principal{UserID: "u", Workspaces: map[string]Role{"w": RoleMember}}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"w":"member"`) {
		t.Fatalf("got %s", b)
	}
	var back Principal
	if err := json.Unmarshal(b, &back); err != nil || back.Workspaces["w"] != RoleMember {
		t.Fatalf("round trip: %v %+v", err, back)
	}
	if r, ok := p.RoleIn("w"); !ok || r != RoleMember {
		t.Fatal("RoleIn member")
	}
	if _, ok := p.RoleIn("other"); ok {
		t.Fatal("RoleIn non-member")
	}
}

func TestMintVerify(t *testing.T) {
	tok, err := Mint(testSecret, Claims{Sub: "alice", Name: "Alice",
		Workspaces: map[string]Role{"w1": RoleAdmin, "w2": RoleViewer}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p, exp, err := NewHMAC(testSecret, Options{}).Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if p.UserID != "alice" || p.Name != "Alice" || p.Workspaces["w1"] != RoleAdmin || p.Workspaces["w2"] != RoleViewer {
		t.Fatalf("principal %+v", p)
	}
	if d := time.Until(exp); d < 59*time.Minute || d > time.Hour+time.Second {
		t.Fatalf("exp in %v", d)
	}
}

func sign(t *testing.T, method jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifyRejects(t *testing.T) {
	v := NewHMAC(testSecret, Options{})
	now := time.Now()
	good := jwt.MapClaims{"sub": "u", "exp": now.Add(time.Hour).Unix()}
	cases := map[string]struct {
		tok  string
		want error
	}{
		"garbage":        {"not.a.token", ErrInvalidToken},
		"empty":          {"", ErrInvalidToken},
		"wrong key":      {sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), good), ErrInvalidToken},
		"RS256 no jwks":  {"eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1IiwiZXhwIjo5OTk5OTk5OTk5fQ.c2ln", ErrInvalidToken},
		"alg none":       {sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good), ErrInvalidToken},
		"no exp":         {sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "u"}), ErrInvalidToken},
		"no sub":         {sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"exp": now.Add(time.Hour).Unix()}), ErrInvalidToken},
		"expired":        {sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "u", "exp": now.Add(-time.Minute).Unix()}), ErrExpired},
		"not yet":        {sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "u", "exp": now.Add(time.Hour).Unix(), "nbf": now.Add(time.Minute).Unix()}), ErrInvalidToken},
		"bad ws type":    {sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "u", "exp": now.Add(time.Hour).Unix(), "workspaces": 5}), ErrInvalidToken},
		"bad ws item":    {sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "u", "exp": now.Add(time.Hour).Unix(), "workspaces": []any{1}}), ErrInvalidToken},
		"future iat":     {sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "u", "exp": now.Add(time.Hour).Unix(), "iat": now.Add(time.Hour).Unix()}), ErrInvalidToken},
		"long sub":       {sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": strings.Repeat("u", MaxSubjectLen+1), "exp": now.Add(time.Hour).Unix()}), ErrInvalidToken},
		"huge":           {strings.Repeat("a", MaxTokenBytes+1), ErrInvalidToken},
		"expired forged": {sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), jwt.MapClaims{"sub": "u", "exp": now.Add(-time.Hour).Unix()}), ErrInvalidToken},
	}
	for name, c := range cases {
		_, _, err := v.Verify(c.tok)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", name, err, c.want)
		}
		if err != nil && c.tok != "" && strings.Contains(err.Error(), c.tok) {
			t.Errorf("%s: error leaks the token", name)
		}
	}
}

func TestVerifyLeewayAndRotation(t *testing.T) {
	now := time.Now()
	// Expired 10 s ago: inside the 30 s leeway.
	tok := sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "u", "exp": now.Add(-10 * time.Second).Unix()})
	if _, _, err := NewHMAC(testSecret, Options{}).Verify(tok); err != nil {
		t.Fatalf("leeway: %v", err)
	}
	next := []byte("next-secret-next-secret-next-sec")
	if _, _, err := NewHMAC(next, Options{Previous: [][]byte{testSecret}}).Verify(tok); err != nil {
		t.Fatalf("previous key: %v", err)
	}
	if _, _, err := NewHMAC(next, Options{}).Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("retired key accepted: %v", err)
	}
}

func TestVerifyIssuerAudienceAndRoles(t *testing.T) {
	tok, err := Mint(testSecret, Claims{Sub: "u", Issuer: "iss", Audience: "aud", Workspaces: map[string]Role{"w": RoleViewer}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := NewHMAC(testSecret, Options{Issuer: "iss", Audience: "aud"}).Verify(tok); err != nil {
		t.Fatal(err)
	}
	if _, _, err := NewHMAC(testSecret, Options{Issuer: "other"}).Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("issuer: %v", err)
	}
	if _, _, err := NewHMAC(testSecret, Options{Audience: "other"}).Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("audience: %v", err)
	}
	// An unknown role grants nothing but does not fail the sign-in.
	tok = sign(t, jwt.SigningMethodHS256, testSecret, jwt.MapClaims{"sub": "u", "exp": time.Now().Add(time.Hour).Unix(),
		"workspaces": map[string]any{"a": "owner", "b": "member"}})
	p, _, err := NewHMAC(testSecret, Options{}).Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.RoleIn("a"); ok || p.Workspaces["b"] != RoleMember {
		t.Fatalf("roles %+v", p.Workspaces)
	}
}

func TestAlgConfusionHeader(t *testing.T) {
	// A token whose header claims HS256 but is signed by "none" style empty
	// signature must fail.
	hdr := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	body := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"u","exp":9999999999}`))
	if _, _, err := NewHMAC(testSecret, Options{}).Verify(hdr + "." + body + "."); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("empty signature accepted: %v", err)
	}
}

func TestLoadOrCreateSecret(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	a, err := LoadOrCreateSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 32 {
		t.Fatalf("len %d", len(a))
	}
	st, err := os.Stat(filepath.Join(dir, SecretFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", st.Mode(), err)
	}
	dst, _ := os.Stat(dir)
	if dst.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v", dst.Mode())
	}
	b, err := LoadOrCreateSecret(dir)
	if err != nil || string(a) != string(b) {
		t.Fatal("second load returned a different secret")
	}
	// A secret left readable by others is tightened on load.
	if err := os.Chmod(filepath.Join(dir, SecretFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateSecret(dir); err != nil {
		t.Fatal(err)
	}
	st, _ = os.Stat(filepath.Join(dir, SecretFile))
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("not tightened: %v", st.Mode())
	}
	// A truncated secret is refused rather than used.
	if err := os.WriteFile(filepath.Join(dir, SecretFile), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateSecret(dir); err == nil {
		t.Fatal("short secret accepted")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Fatalf("temp file left: %s", e.Name())
		}
	}
}
