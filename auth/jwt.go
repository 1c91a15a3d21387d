package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"
)

// Verifier turns a bearer token into a principal and its expiry.
type Verifier interface {
	Verify(token string) (Principal, time.Time, error)
}

var (
	// ErrInvalidToken: the token is malformed, badly signed, not yet valid,
	// or has the wrong algorithm, issuer or audience.
	ErrInvalidToken = errors.New("auth: invalid token")
	// ErrExpired: the token was validly signed but has expired.
	ErrExpired = errors.New("auth: token expired")
)

// DefaultLeeway tolerates small clock skew on exp, nbf and iat.
const DefaultLeeway = 30 * time.Second

// DefaultWorkspacesClaim is the claim holding the workspace memberships.
const DefaultWorkspacesClaim = "workspaces"

// Limits on what a token may carry. A larger token is refused before any
// parsing; the claim limits keep a principal small.
const (
	MaxTokenBytes  = 16 << 10
	MaxSubjectLen  = 256
	MaxNameLen     = 256
	MaxWorkspaces  = 1000
	maxWorkspaceID = 128 // the Host's id limit
)

// HMACAlgorithms are accepted with the shared secret; AsymmetricAlgorithms
// with keys from the JWKS URL. "none" is never accepted, and an algorithm of
// one family is never verified with a key of the other.
var (
	HMACAlgorithms       = []string{"HS256", "HS384", "HS512"}
	AsymmetricAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)

// Options configure a verifier. Zero values mean: no issuer or audience
// check, DefaultLeeway, DefaultWorkspacesClaim, time.Now, and the JWKS
// defaults documented on the fields.
type Options struct {
	Issuer   string
	Audience string
	Leeway   time.Duration
	// WorkspacesClaim names the membership claim. It is looked up as a
	// top-level claim first (so "https://example.com/workspaces" works),
	// then as a dot-separated path ("resource_access.ensemble.roles").
	WorkspacesClaim string
	// Previous holds retired shared secrets still accepted during a rotation.
	Previous [][]byte
	Now      func() time.Time

	// JWKSURL enables RS/PS/ES/EdDSA tokens with keys fetched from this
	// URL (https, or http on a loopback address).
	JWKSURL string
	// JWKSClient fetches the key set (default: a client with JWKSTimeout).
	JWKSClient *http.Client
	// JWKSRefresh is how often the key set is refetched (default 1 h).
	JWKSRefresh time.Duration
	// JWKSUnknownKIDInterval is the least time between two refetches caused
	// by a token whose kid is not in the cached set (default 30 s): an
	// unknown kid costs one fetch, not one per request.
	JWKSUnknownKIDInterval time.Duration
	// JWKSTimeout bounds one fetch (default 10 s).
	JWKSTimeout time.Duration
	// Logger receives JWKS fetch failures (default slog.Default()).
	Logger *slog.Logger
}

// JWT verifies tokens signed with a shared secret (HS256/384/512, with
// previous secrets for rotation) and, when a JWKS URL is configured, with
// the identity provider's published keys (RS/PS/ES/EdDSA).
type JWT struct {
	secrets [][]byte
	jwks    *jwks
	claim   string
	parser  *jwt.Parser
}

// NewHMAC builds a verifier for shared-secret tokens only: secret plus
// opts.Previous. opts.JWKSURL is ignored.
func NewHMAC(secret []byte, opts Options) *JWT {
	opts.JWKSURL = ""
	v, err := New(context.Background(), secret, opts)
	if err != nil { // only JWKS setup can fail
		panic(err)
	}
	return v
}

// New builds a verifier. secret (with opts.Previous) enables HMAC tokens;
// opts.JWKSURL enables asymmetric ones; at least one is required. The key
// set is fetched once now (a failure is logged, not fatal: the next token
// with an unknown kid fetches again) and refreshed until ctx ends.
func New(ctx context.Context, secret []byte, opts Options) (*JWT, error) {
	if opts.Leeway <= 0 {
		opts.Leeway = DefaultLeeway
	}
	if opts.WorkspacesClaim == "" {
		opts.WorkspacesClaim = DefaultWorkspacesClaim
	}
	v := &JWT{claim: opts.WorkspacesClaim}
	for _, k := range append([][]byte{secret}, opts.Previous...) {
		if len(k) > 0 {
			v.secrets = append(v.secrets, k)
		}
	}
	if opts.JWKSURL != "" {
		j, err := newJWKS(ctx, opts)
		if err != nil {
			return nil, err
		}
		v.jwks = j
	}
	var methods []string
	if len(v.secrets) > 0 {
		methods = append(methods, HMACAlgorithms...)
	}
	if v.jwks != nil {
		methods = append(methods, AsymmetricAlgorithms...)
	}
	if len(methods) == 0 {
		return nil, errors.New("auth: configure a shared secret, a JWKS URL, or both")
	}
	popts := []jwt.ParserOption{
		jwt.WithValidMethods(methods),
		jwt.WithLeeway(opts.Leeway),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
	}
	if opts.Issuer != "" {
		popts = append(popts, jwt.WithIssuer(opts.Issuer))
	}
	if opts.Audience != "" {
		popts = append(popts, jwt.WithAudience(opts.Audience))
	}
	if opts.Now != nil {
		popts = append(popts, jwt.WithTimeFunc(opts.Now))
	}
	v.parser = jwt.NewParser(popts...)
	return v, nil
}

// Verify checks the size, algorithm, signature, and the exp, nbf, iat, iss
// and aud claims, then maps the claims to a principal. The signature is
// checked before any claim, so ErrExpired is only returned for a token this
// server would otherwise accept. Errors wrap ErrExpired or ErrInvalidToken
// and never contain the token.
func (v *JWT) Verify(token string) (Principal, time.Time, error) {
	if len(token) > MaxTokenBytes {
		return Principal{}, time.Time{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalidToken, MaxTokenBytes)
	}
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, v.key)
	if errors.Is(err, jwt.ErrTokenExpired) {
		return Principal{}, time.Time{}, ErrExpired
	}
	if err != nil {
		return Principal{}, time.Time{}, fmt.Errorf("%w: %v", ErrInvalidToken, err)
	}
	return v.principal(claims)
}

// key picks the verification key by the token's algorithm family, so a
// public key can never serve as an HMAC secret and a JWKS can never supply
// one.
func (v *JWT) key(t *jwt.Token) (any, error) {
	switch t.Method.(type) {
	case *jwt.SigningMethodHMAC:
		if len(v.secrets) == 0 {
			return nil, errors.New("shared-secret tokens are not accepted")
		}
		set := jwt.VerificationKeySet{}
		for _, k := range v.secrets {
			set.Keys = append(set.Keys, k)
		}
		return set, nil
	case *jwt.SigningMethodRSA, *jwt.SigningMethodRSAPSS, *jwt.SigningMethodECDSA, *jwt.SigningMethodEd25519:
		if v.jwks == nil {
			return nil, errors.New("asymmetric tokens are not accepted")
		}
		return v.jwks.key(t)
	}
	return nil, errors.New("unsupported algorithm")
}

func (v *JWT) principal(c jwt.MapClaims) (Principal, time.Time, error) {
	sub, err := c.GetSubject()
	if err != nil || sub == "" {
		return Principal{}, time.Time{}, fmt.Errorf("%w: sub is required", ErrInvalidToken)
	}
	if len(sub) > MaxSubjectLen || !utf8.ValidString(sub) {
		return Principal{}, time.Time{}, fmt.Errorf("%w: sub is longer than %d bytes or not UTF-8", ErrInvalidToken, MaxSubjectLen)
	}
	exp, err := c.GetExpirationTime()
	if err != nil || exp == nil {
		return Principal{}, time.Time{}, fmt.Errorf("%w: exp is required", ErrInvalidToken)
	}
	p := Principal{UserID: sub, Name: displayName(c), Workspaces: map[string]Role{}}
	raw, ok := lookupClaim(c, v.claim)
	if !ok {
		return p, exp.Time, nil
	}
	add := func(ws, role string) {
		r, err := ParseRole(role)
		if err != nil || !validWorkspaceID(ws) {
			return // an unknown role or an unusable id grants nothing rather than failing the sign-in
		}
		if r > p.Workspaces[ws] {
			p.Workspaces[ws] = r
		}
	}
	switch m := raw.(type) {
	case map[string]any: // {"w1": "member", …}
		if len(m) > MaxWorkspaces {
			return Principal{}, time.Time{}, fmt.Errorf("%w: claim %s lists more than %d workspaces", ErrInvalidToken, v.claim, MaxWorkspaces)
		}
		for ws, r := range m {
			s, _ := r.(string)
			add(ws, s)
		}
	case []any: // ["w1:member", …]; other entries (an IdP's own roles) are ignored
		if len(m) > MaxWorkspaces {
			return Principal{}, time.Time{}, fmt.Errorf("%w: claim %s lists more than %d workspaces", ErrInvalidToken, v.claim, MaxWorkspaces)
		}
		for _, e := range m {
			s, ok := e.(string)
			if !ok {
				return Principal{}, time.Time{}, fmt.Errorf("%w: claim %s must hold strings", ErrInvalidToken, v.claim)
			}
			if i := strings.LastIndexByte(s, ':'); i > 0 {
				add(s[:i], s[i+1:])
			}
		}
	default:
		return Principal{}, time.Time{}, fmt.Errorf("%w: claim %s must be an object or an array", ErrInvalidToken, v.claim)
	}
	return p, exp.Time, nil
}

// lookupClaim finds a claim by its exact name, else by a dotted path.
func lookupClaim(c jwt.MapClaims, name string) (any, bool) {
	if v, ok := c[name]; ok {
		return v, true
	}
	if !strings.Contains(name, ".") {
		return nil, false
	}
	var cur any = map[string]any(c)
	for _, part := range strings.Split(name, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// displayName is name, else preferred_username (Keycloak), cut to
// MaxNameLen bytes at a rune boundary.
func displayName(c jwt.MapClaims) string {
	for _, k := range []string{"name", "preferred_username"} {
		s, ok := c[k].(string)
		if !ok || s == "" || !utf8.ValidString(s) {
			continue
		}
		if len(s) > MaxNameLen {
			s = s[:MaxNameLen]
			for !utf8.ValidString(s) {
				s = s[:len(s)-1]
			}
		}
		return s
	}
	return ""
}

// validWorkspaceID is the Host's id rule: 1–128 printable ASCII bytes
// without spaces.
func validWorkspaceID(ws string) bool {
	if ws == "" || len(ws) > maxWorkspaceID {
		return false
	}
	for i := 0; i < len(ws); i++ {
		if ws[i] <= ' ' || ws[i] > '~' {
			return false
		}
	}
	return true
}

// Claims is what Mint puts in a token.
type Claims struct {
	Sub        string
	Name       string
	Workspaces map[string]Role
	// TTL is the token lifetime; zero means DefaultTTL.
	TTL      time.Duration
	Issuer   string
	Audience string
	// WorkspacesClaim names the membership claim (default "workspaces").
	WorkspacesClaim string
}

// DefaultTTL is the lifetime of a minted token without an explicit TTL.
const DefaultTTL = 12 * time.Hour

// Mint signs an HS256 token for local development and the `token` command.
func Mint(secret []byte, c Claims) (string, error) {
	if len(secret) == 0 {
		return "", errors.New("auth: empty secret")
	}
	if c.Sub == "" {
		return "", errors.New("auth: sub is required")
	}
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.WorkspacesClaim == "" {
		c.WorkspacesClaim = DefaultWorkspacesClaim
	}
	now := time.Now()
	ws := map[string]string{}
	for id, r := range c.Workspaces {
		b, err := r.MarshalText()
		if err != nil {
			return "", err
		}
		ws[id] = string(b)
	}
	mc := jwt.MapClaims{
		"sub":             c.Sub,
		"iat":             jwt.NewNumericDate(now),
		"nbf":             jwt.NewNumericDate(now),
		"exp":             jwt.NewNumericDate(now.Add(c.TTL)),
		c.WorkspacesClaim: ws,
	}
	if c.Name != "" {
		mc["name"] = c.Name
	}
	if c.Issuer != "" {
		mc["iss"] = c.Issuer
	}
	if c.Audience != "" {
		mc["aud"] = c.Audience
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, mc).SignedString(secret)
}
