package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// JWKS defaults (see Options).
const (
	DefaultJWKSRefresh            = time.Hour
	DefaultJWKSUnknownKIDInterval = 30 * time.Second
	DefaultJWKSTimeout            = 10 * time.Second
	// maxJWKSBytes bounds a fetched key set.
	maxJWKSBytes = 1 << 20
)

// jwks holds an identity provider's key set: fetched at start, refreshed
// periodically by jwkset, and refetched when a token names a kid the cache
// does not hold — at most once per unknownKIDInterval, with concurrent
// lookups of unknown kids waiting for the one fetch in progress.
type jwks struct {
	cached   jwkset.Storage // the fetched keys; reads never fetch
	fetcher  jwkset.Storage // reads fetch on an unknown kid
	kf       keyfunc.Keyfunc
	ctx      context.Context
	timeout  time.Duration
	interval time.Duration
	now      func() time.Time

	mu      sync.Mutex
	last    time.Time     // the last unknown-kid fetch started
	pending chan struct{} // closed when the fetch in progress ends
}

func newJWKS(ctx context.Context, opts Options) (*jwks, error) {
	if err := checkJWKSURL(opts.JWKSURL); err != nil {
		return nil, err
	}
	j := &jwks{ctx: ctx, timeout: opts.JWKSTimeout, interval: opts.JWKSUnknownKIDInterval, now: opts.Now}
	if j.timeout <= 0 {
		j.timeout = DefaultJWKSTimeout
	}
	if j.interval <= 0 {
		j.interval = DefaultJWKSUnknownKIDInterval
	}
	if j.now == nil {
		j.now = time.Now
	}
	refresh := opts.JWKSRefresh
	if refresh <= 0 {
		refresh = DefaultJWKSRefresh
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	client := opts.JWKSClient
	if client == nil {
		client = &http.Client{Timeout: j.timeout}
	}
	limited := *client
	limited.Transport = limitBody{next: client.Transport, max: maxJWKSBytes}
	cached, err := jwkset.NewStorageFromHTTP(opts.JWKSURL, jwkset.HTTPClientStorageOptions{
		Client:                    &limited,
		Ctx:                       ctx,
		HTTPTimeout:               j.timeout,
		NoErrorReturnFirstHTTPReq: true, // an unreachable provider at start is retried, not fatal
		RefreshErrorHandler: func(_ context.Context, err error) {
			log.Warn("auth: fetching the JWKS failed; tokens with unknown keys are refused until a fetch succeeds", "err", err)
		},
		RefreshInterval: refresh,
	})
	if err != nil {
		return nil, fmt.Errorf("auth: JWKS: %w", err)
	}
	// The fetcher's own limiter never waits: this type decides when to
	// fetch (jwkset's limiter would block a request for up to a minute).
	fetcher, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs:          map[string]jwkset.Storage{opts.JWKSURL: cached},
		RefreshUnknownKID: rate.NewLimiter(rate.Inf, 1),
		RateLimitWaitMax:  j.timeout,
	})
	if err != nil {
		return nil, fmt.Errorf("auth: JWKS: %w", err)
	}
	j.cached, j.fetcher = cached, fetcher
	j.kf, err = keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: gatedStorage{Storage: fetcher, j: j},
		UseWhitelist: []jwkset.USE{jwkset.UseSig, ""}})
	if err != nil {
		return nil, fmt.Errorf("auth: JWKS: %w", err)
	}
	return j, nil
}

// checkJWKSURL insists on https, except for loopback addresses (tests and
// a provider on the same host): keys fetched over plain HTTP could be
// swapped by anyone on the path, who could then mint tokens.
func checkJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("auth: JWKS URL %q is not an absolute URL", raw)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || strings.EqualFold(host, "localhost") {
			return nil
		}
	}
	return fmt.Errorf("auth: JWKS URL must use https (http only on a loopback address)")
}

// key returns the verification key for t from the key set. A symmetric
// ("oct") key published in the set is never used.
func (j *jwks) key(t *jwt.Token) (any, error) {
	ctx, cancel := context.WithTimeout(j.ctx, j.timeout)
	defer cancel()
	k, err := j.kf.KeyfuncCtx(ctx)(t)
	if err != nil {
		return nil, err
	}
	switch key := k.(type) {
	case []byte:
		return nil, errors.New("the JWKS key is symmetric")
	case jwt.VerificationKeySet:
		out := jwt.VerificationKeySet{}
		for _, x := range key.Keys {
			if _, sym := x.([]byte); !sym {
				out.Keys = append(out.Keys, x)
			}
		}
		return out, nil
	}
	return k, nil
}

// readUnknown is a cache miss for kid: refetch unless one was started less
// than interval ago; a lookup that finds a fetch in progress waits for it.
func (j *jwks) readUnknown(ctx context.Context, kid string) (jwkset.JWK, error) {
	j.mu.Lock()
	if ch := j.pending; ch != nil {
		j.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return jwkset.JWK{}, ctx.Err()
		}
		return j.cached.KeyRead(ctx, kid)
	}
	now := j.now()
	if !j.last.IsZero() && now.Sub(j.last) < j.interval {
		j.mu.Unlock()
		return jwkset.JWK{}, fmt.Errorf("%w (refetched less than %v ago)", jwkset.ErrKeyNotFound, j.interval)
	}
	j.last = now
	ch := make(chan struct{})
	j.pending = ch
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		j.pending = nil
		close(ch)
		j.mu.Unlock()
	}()
	return j.fetcher.KeyRead(ctx, kid)
}

// gatedStorage is the fetcher with its kid lookups routed through the
// cache first and readUnknown on a miss.
type gatedStorage struct {
	jwkset.Storage
	j *jwks
}

func (g gatedStorage) KeyRead(ctx context.Context, kid string) (jwkset.JWK, error) {
	k, err := g.j.cached.KeyRead(ctx, kid)
	if errors.Is(err, jwkset.ErrKeyNotFound) {
		return g.j.readUnknown(ctx, kid)
	}
	return k, err
}

// limitBody caps a response body so a broken or hostile key endpoint
// cannot exhaust memory.
type limitBody struct {
	next http.RoundTripper
	max  int64
}

func (l limitBody) RoundTrip(r *http.Request) (*http.Response, error) {
	next := l.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.LimitReader(resp.Body, l.max), resp.Body}
	return resp, nil
}
