package auth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/auth/authtest"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func claims(sub string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"sub": sub, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		"iss": "https://idp.example/", "aud": "ensemble", "workspaces": map[string]any{"w1": "member"}}
}

// newVerifier builds a verifier with a shared secret and the JWKS, and an
// issuer and audience to check. The unknown-kid interval is long so the
// tests never depend on time passing.
func newVerifier(t *testing.T, j *authtest.JWKS, withSecret bool) *auth.JWT {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var s []byte
	if withSecret {
		s = secret
	}
	v, err := auth.New(ctx, s, auth.Options{JWKSURL: j.URL, Issuer: "https://idp.example/", Audience: "ensemble",
		JWKSUnknownKIDInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestJWKSAlgorithms(t *testing.T) {
	rsa, ec, ed := authtest.NewRSA("rsa-1"), authtest.NewEC("ec-1"), authtest.NewEd25519("ed-1")
	j := authtest.NewJWKS(rsa, ec, ed)
	defer j.Close()
	v := newVerifier(t, j, true)
	for _, k := range []*authtest.Key{rsa, ec, ed} {
		p, _, err := v.Verify(k.Sign(claims("alice")))
		if err != nil {
			t.Fatalf("%s: %v", k.Method.Alg(), err)
		}
		if p.UserID != "alice" || p.Workspaces["w1"] != auth.RoleMember {
			t.Fatalf("%s: principal %+v", k.Method.Alg(), p)
		}
	}
	for _, m := range []jwt.SigningMethod{jwt.SigningMethodHS256, jwt.SigningMethodHS384, jwt.SigningMethodHS512} {
		if _, _, err := v.Verify(authtest.SignHMAC(m, secret, claims("alice"))); err != nil {
			t.Fatalf("%s: %v", m.Alg(), err)
		}
	}
	if j.Hits() != 1 {
		t.Fatalf("known keys must come from the cache: %d fetches", j.Hits())
	}
}

func TestJWKSRejects(t *testing.T) {
	rsa, other := authtest.NewRSA("rsa-1"), authtest.NewRSA("rsa-1")
	j := authtest.NewJWKS(rsa)
	defer j.Close()
	v := newVerifier(t, j, true)
	expired := claims("alice")
	expired["exp"] = time.Now().Add(-time.Hour).Unix()
	wrongAud := claims("alice")
	wrongAud["aud"] = "another-api"
	wrongIss := claims("alice")
	wrongIss["iss"] = "https://evil.example/"
	notYet := claims("alice")
	notYet["nbf"] = time.Now().Add(time.Hour).Unix()
	cases := map[string]struct {
		tok  string
		want error
	}{
		"alg none":               {authtest.AlgNone(claims("alice")), auth.ErrInvalidToken},
		"HS256 over public key":  {authtest.HMACConfusion(rsa, claims("alice")), auth.ErrInvalidToken},
		"signed by another key":  {other.Sign(claims("alice")), auth.ErrInvalidToken},
		"tampered":               {authtest.Tamper(rsa.Sign(claims("alice"))), auth.ErrInvalidToken},
		"expired":                {rsa.Sign(expired), auth.ErrExpired},
		"expired, forged":        {other.Sign(expired), auth.ErrInvalidToken},
		"wrong audience":         {rsa.Sign(wrongAud), auth.ErrInvalidToken},
		"wrong issuer":           {rsa.Sign(wrongIss), auth.ErrInvalidToken},
		"not yet valid":          {rsa.Sign(notYet), auth.ErrInvalidToken},
		"HS256 wrong secret":     {authtest.SignHMAC(jwt.SigningMethodHS256, []byte("not-the-secret-not-the-secret-xx"), claims("alice")), auth.ErrInvalidToken},
		"RS256 named as another": {rsa.SignWithKID("ec-9", claims("alice")), auth.ErrInvalidToken},
	}
	for name, c := range cases {
		if _, _, err := v.Verify(c.tok); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	// Without a shared secret, an HMAC token is refused outright, whatever
	// key it was made with.
	noSecret := newVerifier(t, j, false)
	for _, tok := range []string{authtest.HMACConfusion(rsa, claims("alice")), authtest.SignHMAC(jwt.SigningMethodHS256, secret, claims("alice"))} {
		if _, _, err := noSecret.Verify(tok); !errors.Is(err, auth.ErrInvalidToken) {
			t.Errorf("HMAC without a secret: %v", err)
		}
	}
	// Without a JWKS, an asymmetric token is refused.
	if _, _, err := auth.NewHMAC(secret, auth.Options{}).Verify(rsa.Sign(claims("alice"))); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("RS256 without a JWKS: %v", err)
	}
}

// A symmetric key published in the JWKS is never used, for any algorithm.
func TestJWKSSymmetricKeyIgnored(t *testing.T) {
	rsa := authtest.NewRSA("rsa-1")
	j := authtest.NewJWKS()
	j.SetKeysWithRaw([]*authtest.Key{rsa}, json.RawMessage(fmt.Sprintf(`{"kty":"oct","kid":"sym","alg":"HS256","use":"sig","k":%q}`,
		base64.RawURLEncoding.EncodeToString(secret))))
	defer j.Close()
	v := newVerifier(t, j, false)
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims("alice"))
	tok.Header["kid"] = "sym"
	s, _ := tok.SignedString(secret)
	if _, _, err := v.Verify(s); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("HS256 with a JWKS oct key accepted: %v", err)
	}
	if _, _, err := v.Verify(rsa.Sign(claims("alice"))); err != nil {
		t.Fatalf("the RSA key beside it must still work: %v", err)
	}
}

func TestJWKSRotation(t *testing.T) {
	old, next := authtest.NewRSA("2024-01"), authtest.NewEC("2024-07")
	j := authtest.NewJWKS(old)
	defer j.Close()
	v := newVerifier(t, j, false)
	if _, _, err := v.Verify(old.Sign(claims("alice"))); err != nil {
		t.Fatal(err)
	}
	// The provider rotates: the new key is published and the old one
	// withdrawn. The first token with the new kid fetches the set again.
	j.SetKeys(next)
	if _, _, err := v.Verify(next.Sign(claims("alice"))); err != nil {
		t.Fatalf("rotated key: %v", err)
	}
	if j.Hits() != 2 {
		t.Fatalf("want one refetch for the new kid, got %d fetches", j.Hits())
	}
	// The withdrawn key is gone with the refetch: revocation works.
	if _, _, err := v.Verify(old.Sign(claims("alice"))); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("withdrawn key still accepted: %v", err)
	}
	if _, _, err := v.Verify(next.Sign(claims("bob"))); err != nil {
		t.Fatal(err)
	}
	if j.Hits() != 2 {
		t.Fatalf("the new key must now be cached: %d fetches", j.Hits())
	}
}

func TestJWKSUnknownKIDFetchesOnce(t *testing.T) {
	known, stranger := authtest.NewRSA("known"), authtest.NewRSA("stranger")
	j := authtest.NewJWKS(known)
	defer j.Close()
	v := newVerifier(t, j, false)
	if j.Hits() != 1 {
		t.Fatalf("initial fetch: %d", j.Hits())
	}
	// Many requests, some concurrent, all naming kids nobody published.
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := stranger.SignWithKID(fmt.Sprintf("ghost-%d", i%5), claims("mallory"))
			if _, _, err := v.Verify(tok); !errors.Is(err, auth.ErrInvalidToken) {
				t.Errorf("unknown kid: %v", err)
			}
		}()
	}
	wg.Wait()
	for range 20 {
		if _, _, err := v.Verify(stranger.Sign(claims("mallory"))); !errors.Is(err, auth.ErrInvalidToken) {
			t.Fatalf("unknown kid: %v", err)
		}
	}
	if got := j.Hits(); got != 2 {
		t.Fatalf("want exactly one refetch for unknown kids, got %d fetches in all", got)
	}
	// Known keys keep working from the cache meanwhile.
	if _, _, err := v.Verify(known.Sign(claims("alice"))); err != nil || j.Hits() != 2 {
		t.Fatalf("known key: %v, %d fetches", err, j.Hits())
	}
}

// The unknown-kid refetch is allowed again once the interval has passed
// (a clock the test controls).
func TestJWKSUnknownKIDIntervalPasses(t *testing.T) {
	k := authtest.NewRSA("later")
	j := authtest.NewJWKS()
	defer j.Close()
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	v, err := auth.New(t.Context(), nil, auth.Options{JWKSURL: j.URL, JWKSUnknownKIDInterval: time.Minute, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	c := jwt.MapClaims{"sub": "alice", "exp": now.Add(time.Hour).Unix()}
	if _, _, err := v.Verify(k.Sign(c)); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatal("unpublished key accepted")
	}
	j.SetKeys(k) // published right after the refetch
	if _, _, err := v.Verify(k.Sign(c)); !errors.Is(err, auth.ErrInvalidToken) || j.Hits() != 2 {
		t.Fatalf("within the interval: %v, %d fetches", err, j.Hits())
	}
	mu.Lock()
	now = now.Add(time.Minute + time.Second)
	mu.Unlock()
	if _, _, err := v.Verify(k.Sign(c)); err != nil || j.Hits() != 3 {
		t.Fatalf("after the interval: %v, %d fetches", err, j.Hits())
	}
}

func TestJWKSURLMustBeSecure(t *testing.T) {
	for _, u := range []string{"http://idp.example/.well-known/jwks.json", "ftp://idp.example/jwks", "not a url", "/jwks.json"} {
		if _, err := auth.New(t.Context(), nil, auth.Options{JWKSURL: u}); err == nil {
			t.Errorf("%q accepted", u)
		}
	}
	if _, err := auth.New(t.Context(), nil, auth.Options{}); err == nil {
		t.Error("a verifier with neither secret nor JWKS accepted")
	}
}

// An unreachable provider at start is not fatal; the first token with an
// unknown kid fetches again.
func TestJWKSUnavailableAtStart(t *testing.T) {
	k := authtest.NewRSA("k")
	j := authtest.NewJWKS(k)
	url := j.URL
	j.Close()
	v, err := auth.New(t.Context(), nil, auth.Options{JWKSURL: url, JWKSTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.Verify(k.Sign(claims("alice"))); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("want invalid while the provider is down: %v", err)
	}
}

func TestClaimMapping(t *testing.T) {
	now := time.Now()
	base := func(extra jwt.MapClaims) string {
		c := jwt.MapClaims{"sub": "u", "exp": now.Add(time.Hour).Unix()}
		for k, v := range extra {
			c[k] = v
		}
		return authtest.SignHMAC(jwt.SigningMethodHS256, secret, c)
	}
	cases := []struct {
		name  string
		claim string
		tok   string
		want  map[string]auth.Role
		dname string
	}{
		{"object", "", base(jwt.MapClaims{"workspaces": map[string]any{"a": "admin", "b": "viewer", "c": "owner", "bad id": "member"}, "name": "Ann"}),
			map[string]auth.Role{"a": auth.RoleAdmin, "b": auth.RoleViewer}, "Ann"},
		{"array, highest role wins, foreign roles ignored", "", base(jwt.MapClaims{"workspaces": []any{"a:viewer", "a:member", "offline_access", "b:admin"},
			"preferred_username": "ann"}),
			map[string]auth.Role{"a": auth.RoleMember, "b": auth.RoleAdmin}, "ann"},
		{"namespaced claim (Auth0)", "https://ensemble.example/workspaces", base(jwt.MapClaims{
			"https://ensemble.example/workspaces": map[string]any{"a": "member"}}),
			map[string]auth.Role{"a": auth.RoleMember}, ""},
		{"nested path (Keycloak client roles)", "resource_access.ensemble.roles", base(jwt.MapClaims{
			"resource_access": map[string]any{"ensemble": map[string]any{"roles": []any{"a:admin", "uma_authorization"}}}}),
			map[string]auth.Role{"a": auth.RoleAdmin}, ""},
		{"claim absent", "", base(nil), map[string]auth.Role{}, ""},
		{"configured claim, default one ignored", "ens", base(jwt.MapClaims{"workspaces": map[string]any{"a": "admin"}}),
			map[string]auth.Role{}, ""},
	}
	for _, c := range cases {
		p, _, err := auth.NewHMAC(secret, auth.Options{WorkspacesClaim: c.claim}).Verify(c.tok)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if fmt.Sprint(p.Workspaces) != fmt.Sprint(c.want) || p.Name != c.dname {
			t.Errorf("%s: %+v, want %v %q", c.name, p, c.want, c.dname)
		}
	}
	many := map[string]any{}
	for i := range auth.MaxWorkspaces + 1 {
		many[fmt.Sprint("w", i)] = "viewer"
	}
	if _, _, err := auth.NewHMAC(secret, auth.Options{}).Verify(base(jwt.MapClaims{"workspaces": many})); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("too many workspaces: %v", err)
	}
	long := strings.Repeat("é", auth.MaxNameLen)
	p, _, err := auth.NewHMAC(secret, auth.Options{}).Verify(base(jwt.MapClaims{"name": long}))
	if err != nil || len(p.Name) > auth.MaxNameLen || !strings.HasPrefix(long, p.Name) {
		t.Errorf("long name: %v %d", err, len(p.Name))
	}
}

func TestMintUsesTheConfiguredClaim(t *testing.T) {
	tok, err := auth.Mint(secret, auth.Claims{Sub: "u", WorkspacesClaim: "https://ensemble.example/ws",
		Workspaces: map[string]auth.Role{"a": auth.RoleViewer}})
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := auth.NewHMAC(secret, auth.Options{WorkspacesClaim: "https://ensemble.example/ws"}).Verify(tok)
	if err != nil || p.Workspaces["a"] != auth.RoleViewer {
		t.Fatalf("%v %+v", err, p)
	}
}
