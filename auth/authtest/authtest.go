// Package authtest holds test helpers for tokens: signing keys of every
// supported asymmetric kind, a JWKS server that counts its fetches, and the
// classic forged tokens (alg none, HMAC over a public key). Tests only.
package authtest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// Key is an asymmetric signing key with its kid.
type Key struct {
	KID     string
	Method  jwt.SigningMethod
	Private crypto.Signer
}

// Public is the verification key.
func (k *Key) Public() crypto.PublicKey { return k.Private.Public() }

// NewRSA returns a 2048-bit RS256 key.
func NewRSA(kid string) *Key {
	pk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return &Key{KID: kid, Method: jwt.SigningMethodRS256, Private: pk}
}

// NewEC returns a P-256 ES256 key.
func NewEC(kid string) *Key {
	pk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return &Key{KID: kid, Method: jwt.SigningMethodES256, Private: pk}
}

// NewEd25519 returns an EdDSA key.
func NewEd25519(kid string) *Key {
	_, pk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	return &Key{KID: kid, Method: jwt.SigningMethodEdDSA, Private: pk}
}

// Sign signs claims with the key, naming its kid in the header.
func (k *Key) Sign(claims jwt.MapClaims) string {
	t := jwt.NewWithClaims(k.Method, claims)
	t.Header["kid"] = k.KID
	s, err := t.SignedString(k.Private)
	if err != nil {
		panic(err)
	}
	return s
}

// SignWithKID signs claims with the key but names another kid.
func (k *Key) SignWithKID(kid string, claims jwt.MapClaims) string {
	t := jwt.NewWithClaims(k.Method, claims)
	t.Header["kid"] = kid
	s, err := t.SignedString(k.Private)
	if err != nil {
		panic(err)
	}
	return s
}

// PublicPEM is the public key as a PEM block: what an attacker can read
// from the JWKS and try as an HMAC secret.
func (k *Key) PublicPEM() []byte {
	der, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// HMACConfusion is the key-confusion forgery: an HS256 token carrying the
// key's kid, "signed" with the key's public PEM as the HMAC secret.
func HMACConfusion(k *Key, claims jwt.MapClaims) string {
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	t.Header["kid"] = k.KID
	s, err := t.SignedString(k.PublicPEM())
	if err != nil {
		panic(err)
	}
	return s
}

// SignHMAC signs claims with a shared secret.
func SignHMAC(method jwt.SigningMethod, secret []byte, claims jwt.MapClaims) string {
	s, err := jwt.NewWithClaims(method, claims).SignedString(secret)
	if err != nil {
		panic(err)
	}
	return s
}

// AlgNone is an unsigned token ({"alg":"none"}, empty signature).
func AlgNone(claims jwt.MapClaims) string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		panic(err)
	}
	return s
}

// Tamper adds a claim to the payload of a signed token, keeping the
// original signature, which then no longer matches.
func Tamper(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		panic("not a JWS")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	m["tampered"] = true
	b, _ = json.Marshal(m)
	parts[1] = base64.RawURLEncoding.EncodeToString(b)
	return strings.Join(parts, ".")
}

// JWKS is an httptest server publishing a key set and counting fetches.
type JWKS struct {
	*httptest.Server
	hits atomic.Int64

	mu    sync.Mutex
	body  []byte
	extra []json.RawMessage
}

// NewJWKS starts a JWKS server publishing keys. Close it when done.
func NewJWKS(keys ...*Key) *JWKS {
	j := &JWKS{}
	j.SetKeys(keys...)
	j.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		j.hits.Add(1)
		j.mu.Lock()
		b := j.body
		j.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	}))
	return j
}

// SetKeys replaces the published keys (a rotation), plus any raw extra
// JWK objects.
func (j *JWKS) SetKeys(keys ...*Key) { j.set(keys, nil) }

// SetKeysWithRaw publishes keys and raw JWK objects (e.g. an "oct" key).
func (j *JWKS) SetKeysWithRaw(keys []*Key, raw ...json.RawMessage) { j.set(keys, raw) }

func (j *JWKS) set(keys []*Key, raw []json.RawMessage) {
	store := jwkset.NewMemoryStorage()
	ctx := context.Background()
	for _, k := range keys {
		jwk, err := jwkset.NewJWKFromKey(k.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
			KID: k.KID, ALG: jwkset.ALG(k.Method.Alg()), USE: jwkset.UseSig}})
		if err != nil {
			panic(err)
		}
		if err := store.KeyWrite(ctx, jwk); err != nil {
			panic(err)
		}
	}
	pub, err := store.JSONPublic(ctx)
	if err != nil {
		panic(err)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(pub, &set); err != nil {
		panic(err)
	}
	set.Keys = append(set.Keys, raw...)
	b, _ := json.Marshal(set)
	j.mu.Lock()
	j.body = b
	j.mu.Unlock()
}

// Hits is how many times the key set was fetched.
func (j *JWKS) Hits() int64 { return j.hits.Load() }
