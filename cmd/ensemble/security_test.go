package main

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/auth/authtest"
)

func TestServeHelpNamesSecuritySettings(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseServe([]string{"--help"}, &out); err != errHelp {
		t.Fatalf("want errHelp, got %v", err)
	}
	for _, env := range []string{"ENSEMBLE_JWT_PREVIOUS_SECRET", "ENSEMBLE_JWKS_URL", "ENSEMBLE_JWT_WORKSPACES_CLAIM",
		"ENSEMBLE_JWT_LEEWAY", "ENSEMBLE_ALLOWED_ORIGINS", "ENSEMBLE_MAX_FRAME_BYTES", "ENSEMBLE_MAX_BODY_BYTES",
		"ENSEMBLE_MAX_PROMPT_BYTES", "ENSEMBLE_WS_MAX_IN_FLIGHT", "ENSEMBLE_WS_REQUEST_RATE", "ENSEMBLE_HTTP_REQUEST_RATE",
		"ENSEMBLE_MAX_CONNS_PER_USER", "ENSEMBLE_MAX_PENDING_HELLO"} {
		if !strings.Contains(out.String(), env) {
			t.Errorf("--help does not mention %s", env)
		}
	}
}

func TestSecuritySettingsFromEnvironmentAndFlags(t *testing.T) {
	t.Setenv("ENSEMBLE_ALLOWED_ORIGINS", "https://app.example.com, *.example.org")
	t.Setenv("ENSEMBLE_WS_REQUEST_RATE", "7.5")
	t.Setenv("ENSEMBLE_MAX_CONNS_PER_USER", "3")
	t.Setenv("ENSEMBLE_JWT_WORKSPACES_CLAIM", "https://ensemble.example/ws")
	c, err := parseServe([]string{"--max-frame-bytes", "2048", "--jwt-leeway", "5s"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	s := c.security
	if len(s.origins) != 2 || s.origins[1] != "*.example.org" || s.limits.RequestRate != 7.5 || s.limits.MaxConnsPerUser != 3 ||
		s.limits.MaxFrameBytes != 2048 || s.leeway != 5*time.Second || s.workspacesClaim != "https://ensemble.example/ws" {
		t.Fatalf("settings not applied: %+v", s)
	}
	for _, args := range [][]string{{"--max-prompt-bytes", "300000"}, {"--ws-max-in-flight", "0"}, {"--jwt-leeway", "1h"},
		{"--jwt-workspaces-claim", ""}, {"--max-frame-bytes", "10"}} {
		if _, err := parseServe(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	t.Setenv("ENSEMBLE_MAX_CONNS_PER_USER", "many")
	if _, err := parseServe(nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "ENSEMBLE_MAX_CONNS_PER_USER") {
		t.Fatalf("a bad number must name its variable: %v", err)
	}
}

func serveConfigFor(t *testing.T, args ...string) serveConfig {
	t.Helper()
	c, err := parseServe(append([]string{"--data-dir", t.TempDir()}, args...), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestVerifierModes(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	secret := strings.Repeat("s", 32)
	old := strings.Repeat("o", 32)
	rsa := authtest.NewRSA("k1")
	j := authtest.NewJWKS(rsa)
	defer j.Close()
	claims := func() jwt.MapClaims {
		return jwt.MapClaims{"sub": "u", "exp": time.Now().Add(time.Hour).Unix(), "workspaces": map[string]any{"w": "member"}}
	}

	// Default: the local secret, created in the data dir.
	c := serveConfigFor(t)
	v, key, err := newVerifier(t.Context(), c, log)
	if err != nil || key == nil {
		t.Fatalf("default: %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.dataDir, auth.SecretFile)); err != nil {
		t.Fatal("no local secret")
	}
	if _, _, err := v.Verify(authtest.SignHMAC(jwt.SigningMethodHS512, key, claims())); err != nil {
		t.Fatalf("HS512 with the local secret: %v", err)
	}
	line, err := signInLine(c, key, "127.0.0.1:1")
	if err != nil || !strings.HasPrefix(line, "Sign in: http://127.0.0.1:1/#token=") {
		t.Fatalf("sign-in line %q %v", line, err)
	}

	// JWKS only: provider tokens, no shared secret, no local file, no link.
	c = serveConfigFor(t, "--jwks-url", j.URL)
	v, key, err = newVerifier(t.Context(), c, log)
	if err != nil || key != nil {
		t.Fatalf("jwks only: %v %v", key, err)
	}
	if _, err := os.Stat(filepath.Join(c.dataDir, auth.SecretFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a JWKS-only server must not create a local secret: %v", err)
	}
	if _, _, err := v.Verify(rsa.Sign(claims())); err != nil {
		t.Fatalf("RS256: %v", err)
	}
	if _, _, err := v.Verify(authtest.HMACConfusion(rsa, claims())); err == nil {
		t.Fatal("HS256 accepted by a JWKS-only server")
	}
	if line, _ := signInLine(c, key, "x"); strings.Contains(line, "token=") {
		t.Fatalf("JWKS-only printed a link: %q", line)
	}

	// Both, with a previous secret during a rotation.
	c = serveConfigFor(t, "--jwks-url", j.URL, "--jwt-secret", secret, "--jwt-previous-secret", old)
	v, key, err = newVerifier(t.Context(), c, log)
	if err != nil || string(key) != secret {
		t.Fatalf("both: %v", err)
	}
	for _, tok := range []string{rsa.Sign(claims()), authtest.SignHMAC(jwt.SigningMethodHS256, []byte(secret), claims()),
		authtest.SignHMAC(jwt.SigningMethodHS256, []byte(old), claims())} {
		if _, _, err := v.Verify(tok); err != nil {
			t.Fatalf("both: %v", err)
		}
	}

	for _, args := range [][]string{
		{"--jwks-url", j.URL, "--jwt-previous-secret", old}, // previous without a current secret
		{"--jwt-secret", secret, "--jwt-previous-secret", "short"},
		{"--jwks-url", "http://idp.example/jwks"}, // plain http off loopback
	} {
		if _, _, err := newVerifier(t.Context(), serveConfigFor(t, args...), log); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestTokenCommand(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	// Without the server's secret there is nothing to sign with: refuse,
	// name the directory, and create nothing.
	err := token([]string{"--data-dir", dir}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), dir) || out.Len() != 0 {
		t.Fatalf("minted without a server secret: %v %q", err, out.String())
	}
	if _, statErr := os.Stat(filepath.Join(dir, auth.SecretFile)); !errors.Is(statErr, fs.ErrNotExist) {
		t.Fatalf("token created a secret: %v", statErr)
	}
	if _, err := auth.LoadOrCreateSecret(dir); err != nil { // what serve does on its first start
		t.Fatal(err)
	}
	err = token([]string{"--data-dir", dir, "--workspace", "w1:viewer, w2,w3:admin", "--role", "member", "--sub", "ann",
		"--ttl", "2h", "--jwt-workspaces-claim", "org.ws", "--jwt-issuer", "iss", "--jwt-audience", "aud"}, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	key, err := auth.LoadOrCreateSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, exp, err := auth.NewHMAC(key, auth.Options{WorkspacesClaim: "org.ws", Issuer: "iss", Audience: "aud"}).Verify(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]auth.Role{"w1": auth.RoleViewer, "w2": auth.RoleMember, "w3": auth.RoleAdmin}
	if p.UserID != "ann" || len(p.Workspaces) != 3 || p.Workspaces["w1"] != want["w1"] || p.Workspaces["w2"] != want["w2"] ||
		p.Workspaces["w3"] != want["w3"] {
		t.Fatalf("principal %+v", p)
	}
	if d := time.Until(exp); d < time.Hour || d > 2*time.Hour {
		t.Fatalf("ttl: %v", d)
	}
	for _, args := range [][]string{{"--workspace", "w1:owner"}, {"--workspace", ","}, {"--role", "root"}} {
		if err := token(append([]string{"--data-dir", dir}, args...), &out, &errOut); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
