package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/server"
)

// securityConfig is the serve settings for tokens, origins and limits
// (docs/security.md describes each).
type securityConfig struct {
	previousSecret  string
	jwksURL         string
	workspacesClaim string
	leeway          time.Duration
	origins         []string
	limits          server.Limits
}

// securityFlags declares the security settings on f; call the returned
// function after f.parse.
func securityFlags(f *flags) func() (securityConfig, error) {
	d := server.DefaultLimits()
	prev := f.string("jwt-previous-secret", "ENSEMBLE_JWT_PREVIOUS_SECRET", "", "retired shared secret still accepted while tokens signed with it expire (rotation)")
	jwks := f.string("jwks-url", "ENSEMBLE_JWKS_URL", "", "identity provider's JWKS URL (https) for RS/PS/ES/EdDSA tokens; without --jwt-secret, shared-secret tokens are then refused")
	claim := f.string("jwt-workspaces-claim", "ENSEMBLE_JWT_WORKSPACES_CLAIM", auth.DefaultWorkspacesClaim, "claim holding workspace memberships: a claim name, or a dotted path into nested claims")
	leeway := f.duration("jwt-leeway", "ENSEMBLE_JWT_LEEWAY", auth.DefaultLeeway, "clock skew tolerated on exp, nbf and iat")
	origins := f.string("allowed-origins", "ENSEMBLE_ALLOWED_ORIGINS", "", "comma-separated browser origins allowed to open the WebSocket besides the server's own (host patterns like *.example.com, or https://app.example.com)")
	frame := f.int64("max-frame-bytes", "ENSEMBLE_MAX_FRAME_BYTES", d.MaxFrameBytes, "largest WebSocket frame a client may send (larger: close 1009)")
	body := f.int64("max-body-bytes", "ENSEMBLE_MAX_BODY_BYTES", d.MaxBodyBytes, "largest HTTP request body")
	prompt := f.int64("max-prompt-bytes", "ENSEMBLE_MAX_PROMPT_BYTES", int64(d.MaxPromptBytes), "largest prompt content: text, display text, quotes and attachment references (at most 262144)")
	inflight := f.int64("ws-max-in-flight", "ENSEMBLE_WS_MAX_IN_FLIGHT", int64(d.MaxInFlight), "requests running at once per WebSocket connection (negative: unlimited)")
	wsRate := f.float("ws-request-rate", "ENSEMBLE_WS_REQUEST_RATE", d.RequestRate, "frames per second per WebSocket connection, with bursts of twice that (negative: unlimited)")
	httpRate := f.float("http-request-rate", "ENSEMBLE_HTTP_REQUEST_RATE", d.HTTPRate, "HTTP requests per second per user, with bursts of twice that (negative: unlimited)")
	conns := f.int64("max-conns-per-user", "ENSEMBLE_MAX_CONNS_PER_USER", int64(d.MaxConnsPerUser), "open WebSocket connections per user on this replica (negative: unlimited)")
	pending := f.int64("max-pending-hello", "ENSEMBLE_MAX_PENDING_HELLO", int64(d.MaxPendingHello), "WebSocket connections waiting for their hello frame (negative: unlimited)")
	subs := f.int64("max-subscribes", "ENSEMBLE_MAX_SUBSCRIBES", int64(d.MaxSubscribes), "subscribes running at once on this replica; beyond, unavailable with a retryAfterMs hint (reconnect-storm admission)")
	return func() (securityConfig, error) {
		c := securityConfig{previousSecret: *prev, jwksURL: *jwks, workspacesClaim: *claim, leeway: *leeway,
			limits: server.Limits{MaxFrameBytes: *frame, MaxBodyBytes: *body, MaxPromptBytes: int(*prompt),
				MaxInFlight: int(*inflight), RequestRate: *wsRate, HTTPRate: *httpRate,
				MaxConnsPerUser: int(*conns), MaxPendingHello: int(*pending), MaxSubscribes: int(*subs)}}
		for _, o := range strings.Split(*origins, ",") {
			if o = strings.TrimSpace(o); o != "" {
				c.origins = append(c.origins, o)
			}
		}
		switch {
		case c.workspacesClaim == "":
			return c, errors.New("--jwt-workspaces-claim must not be empty")
		case c.leeway < 0 || c.leeway > 5*time.Minute:
			return c, errors.New("--jwt-leeway must be between 0 and 5m")
		case *frame < 1024 || *body < 1024:
			return c, errors.New("--max-frame-bytes and --max-body-bytes must be at least 1024")
		case *prompt < 1 || *prompt > 256<<10:
			return c, errors.New("--max-prompt-bytes must be between 1 and 262144")
		case *inflight == 0 || *conns == 0 || *wsRate == 0 || *httpRate == 0 || *pending == 0:
			return c, errors.New("limits must not be 0 (use a negative value for unlimited)")
		}
		if c.leeway == 0 {
			c.leeway = time.Nanosecond // zero would mean the default in auth and server
		}
		return c, nil
	}
}

// newVerifier builds the token verifier for serve. It returns the shared
// secret when HMAC tokens are on (for the sign-in link), nil otherwise:
// with a JWKS URL and no explicit secret, only the identity provider's
// tokens are accepted and no local secret is created.
func newVerifier(ctx context.Context, c serveConfig, log *slog.Logger) (auth.Verifier, []byte, error) {
	sec := c.security
	var key []byte
	if c.jwtSecret != "" || sec.jwksURL == "" {
		var err error
		if key, err = signingSecret(c.jwtSecret, c.dataDir, true); err != nil {
			return nil, nil, err
		}
	}
	var previous [][]byte
	if sec.previousSecret != "" {
		if key == nil {
			return nil, nil, errors.New("--jwt-previous-secret needs --jwt-secret (shared-secret tokens are off with only --jwks-url)")
		}
		if len(sec.previousSecret) < 32 {
			return nil, nil, errors.New("the previous JWT secret must be at least 32 bytes")
		}
		previous = append(previous, []byte(sec.previousSecret))
	}
	v, err := auth.New(ctx, key, auth.Options{Issuer: c.jwtIssuer, Audience: c.jwtAudience, Leeway: sec.leeway,
		WorkspacesClaim: sec.workspacesClaim, Previous: previous, JWKSURL: sec.jwksURL, Logger: log.With("component", "auth")})
	if err != nil {
		return nil, nil, err
	}
	log.Info("token verification", "sharedSecret", key != nil, "previousSecret", previous != nil,
		"jwks", sec.jwksURL != "", "issuer", c.jwtIssuer, "audience", c.jwtAudience, "workspacesClaim", sec.workspacesClaim)
	return v, key, nil
}

// signInLine is what serve prints after its address: a sign-in link with
// a local admin token when shared-secret tokens are on.
func signInLine(c serveConfig, key []byte, addr string) (string, error) {
	if key == nil {
		return "Sign in with a token from your identity provider (no local sign-in link: shared-secret tokens are off).", nil
	}
	tok, err := auth.Mint(key, auth.Claims{Sub: "local", Name: "Local user", TTL: 30 * 24 * time.Hour,
		Workspaces: map[string]auth.Role{c.workspace: auth.RoleAdmin}, Issuer: c.jwtIssuer, Audience: c.jwtAudience,
		WorkspacesClaim: c.security.workspacesClaim})
	if err != nil {
		return "", err
	}
	return "Sign in: " + signInLink(addr, tok), nil
}

func (f *flags) int64(name, env string, def int64, help string) *int64 {
	if v, ok := os.LookupEnv(env); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			f.envErr(name, fmt.Errorf("%s: %q is not an integer", env, v))
		}
		def = n
	}
	return f.Int64(name, def, help+" (env "+env+")")
}

func (f *flags) float(name, env string, def float64, help string) *float64 {
	if v, ok := os.LookupEnv(env); ok {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil {
			f.envErr(name, fmt.Errorf("%s: %q is not a number", env, v))
		}
		def = n
	}
	return f.Float64(name, def, help+" (env "+env+")")
}
