package auth

import (
	"errors"
	"fmt"
	"time"

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
	// ErrExpired: the token was valid but has expired.
	ErrExpired = errors.New("auth: token expired")
)

// DefaultLeeway tolerates small clock skew on exp and nbf.
const DefaultLeeway = 30 * time.Second

// DefaultWorkspacesClaim is the claim holding workspace → role.
const DefaultWorkspacesClaim = "workspaces"

// Options tune HS256 verification. Zero values mean: no issuer or audience
// check, DefaultLeeway, DefaultWorkspacesClaim, time.Now.
type Options struct {
	Issuer          string
	Audience        string
	Leeway          time.Duration
	WorkspacesClaim string
	// Previous holds retired secrets still accepted during a rotation.
	Previous [][]byte
	Now      func() time.Time
}

// HS256 verifies tokens signed with a shared secret. The algorithm is pinned:
// alg "none" and every other algorithm are rejected, so a public key can
// never be confused with the secret.
type HS256 struct {
	keys   [][]byte
	claim  string
	parser *jwt.Parser
}

// NewHS256 builds a verifier for secret (plus opts.Previous for rotation).
func NewHS256(secret []byte, opts Options) *HS256 {
	if opts.Leeway <= 0 {
		opts.Leeway = DefaultLeeway
	}
	if opts.WorkspacesClaim == "" {
		opts.WorkspacesClaim = DefaultWorkspacesClaim
	}
	popts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithLeeway(opts.Leeway),
		jwt.WithExpirationRequired(),
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
	keys := [][]byte{secret}
	keys = append(keys, opts.Previous...)
	return &HS256{keys: keys, claim: opts.WorkspacesClaim, parser: jwt.NewParser(popts...)}
}

// Verify checks the signature, algorithm and time claims and maps the claims
// to a principal. Errors wrap ErrExpired or ErrInvalidToken and never
// contain the token.
func (v *HS256) Verify(token string) (Principal, time.Time, error) {
	var lastErr error
	for _, key := range v.keys {
		if len(key) == 0 {
			continue
		}
		claims := jwt.MapClaims{}
		_, err := v.parser.ParseWithClaims(token, claims, func(*jwt.Token) (any, error) { return key, nil })
		if err == nil {
			return v.principal(claims)
		}
		lastErr = err
		if !errors.Is(err, jwt.ErrTokenSignatureInvalid) {
			break // only a signature mismatch is worth trying the next key
		}
	}
	if errors.Is(lastErr, jwt.ErrTokenExpired) {
		return Principal{}, time.Time{}, ErrExpired
	}
	return Principal{}, time.Time{}, fmt.Errorf("%w: %v", ErrInvalidToken, lastErr)
}

func (v *HS256) principal(c jwt.MapClaims) (Principal, time.Time, error) {
	sub, err := c.GetSubject()
	if err != nil || sub == "" {
		return Principal{}, time.Time{}, fmt.Errorf("%w: sub is required", ErrInvalidToken)
	}
	exp, err := c.GetExpirationTime()
	if err != nil || exp == nil {
		return Principal{}, time.Time{}, fmt.Errorf("%w: exp is required", ErrInvalidToken)
	}
	p := Principal{UserID: sub, Workspaces: map[string]Role{}}
	if name, ok := c["name"].(string); ok {
		p.Name = name
	}
	if raw, ok := c[v.claim]; ok {
		m, ok := raw.(map[string]any)
		if !ok {
			return Principal{}, time.Time{}, fmt.Errorf("%w: claim %s must be an object", ErrInvalidToken, v.claim)
		}
		for ws, r := range m {
			s, _ := r.(string)
			role, err := ParseRole(s)
			if err != nil || ws == "" {
				continue // an unknown role grants nothing rather than failing the sign-in
			}
			p.Workspaces[ws] = role
		}
	}
	return p, exp.Time, nil
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
		"sub":                  c.Sub,
		"iat":                  jwt.NewNumericDate(now),
		"nbf":                  jwt.NewNumericDate(now),
		"exp":                  jwt.NewNumericDate(now.Add(c.TTL)),
		DefaultWorkspacesClaim: ws,
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
