package server

import (
	"github.com/ensemble-dev/ensemble/protocol"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/ensemble-dev/ensemble/host"
)

// Limits bound what one client can make the server do. Every limit is
// answered with a typed error or a documented close code (docs/security.md
// lists them with their settings). A zero field takes its default; a
// negative rate or count means unlimited.
type Limits struct {
	// MaxFrameBytes bounds one WebSocket frame from a client; a larger
	// frame closes the connection with 1009 (message too big).
	MaxFrameBytes int64
	// MaxBodyBytes bounds an HTTP request body (invalid_input beyond).
	MaxBodyBytes int64
	// MaxPromptBytes bounds one prompt's content: text, display text,
	// quotes and attachment references together (invalid_input beyond).
	// It is capped at the Host's own limit on text and display text.
	MaxPromptBytes int
	// MaxInFlight bounds concurrently running requests per WebSocket
	// connection (rate_limited beyond).
	MaxInFlight int
	// RequestRate and RequestBurst bound the frames a WebSocket connection
	// may send, per second and in a burst (rate_limited beyond).
	RequestRate  float64
	RequestBurst int
	// HTTPRate and HTTPBurst bound a user's HTTP requests, per second and
	// in a burst (429 rate_limited beyond).
	HTTPRate  float64
	HTTPBurst int
	// MaxConnsPerUser bounds a user's open WebSocket connections on this
	// replica (429 before the upgrade, or close 4029 after a hello).
	MaxConnsPerUser int
	// MaxPendingHello bounds connections that are upgraded but not yet
	// authenticated (503 unavailable beyond).
	MaxPendingHello int
	// MaxSubscribes bounds subscribes running at once on this replica
	// (unavailable with retryAfterMs beyond): the admission control that
	// paces a reconnect storm.
	MaxSubscribes int
}

// DefaultLimits are the limits of a server configured with none.
func DefaultLimits() Limits {
	return Limits{
		MaxFrameBytes:   64 << 10,
		MaxBodyBytes:    2 << 20,
		MaxPromptBytes:  host.MaxContentBytes,
		MaxInFlight:     16,
		RequestRate:     50,
		RequestBurst:    100,
		HTTPRate:        50,
		HTTPBurst:       100,
		MaxConnsPerUser: 32,
		MaxPendingHello: 1024,
		MaxSubscribes:   64,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxSubscribes <= 0 {
		l.MaxSubscribes = d.MaxSubscribes
	}
	if l.MaxFrameBytes <= 0 {
		l.MaxFrameBytes = d.MaxFrameBytes
	}
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = d.MaxBodyBytes
	}
	if l.MaxPromptBytes <= 0 || l.MaxPromptBytes > host.MaxContentBytes {
		l.MaxPromptBytes = d.MaxPromptBytes
	}
	if l.MaxInFlight == 0 {
		l.MaxInFlight = d.MaxInFlight
	}
	if l.MaxInFlight < 0 {
		l.MaxInFlight = math.MaxInt32
	}
	if l.RequestRate == 0 {
		l.RequestRate = d.RequestRate
	}
	if l.RequestBurst <= 0 {
		l.RequestBurst = max(1, int(2*l.RequestRate))
	}
	if l.HTTPRate == 0 {
		l.HTTPRate = d.HTTPRate
	}
	if l.HTTPBurst <= 0 {
		l.HTTPBurst = max(1, int(2*l.HTTPRate))
	}
	if l.MaxConnsPerUser == 0 {
		l.MaxConnsPerUser = d.MaxConnsPerUser
	}
	if l.MaxPendingHello == 0 {
		l.MaxPendingHello = d.MaxPendingHello
	}
	if l.MaxPendingHello < 0 {
		l.MaxPendingHello = math.MaxInt32
	}
	return l
}

// CloseTooManyConnections closes a hello-authenticated connection beyond
// the user's connection limit. It is in the reconnect range: the client
// may retry with backoff once another of its connections has closed.
const CloseTooManyConnections = websocket.StatusCode(protocol.CloseTooMany)

func limitOf(r float64) rate.Limit {
	if r < 0 {
		return rate.Inf
	}
	return rate.Limit(r)
}

func rateLimited(reason, msg string) error {
	return &host.Error{Code: host.CodeRateLimited, Message: msg, Reason: reason}
}

// connCounter counts open WebSocket connections per user.
type connCounter struct {
	max int // < 0: unlimited
	mu  sync.Mutex
	n   map[string]int
}

// acquire takes a slot for user; release gives it back (once).
func (c *connCounter) acquire(user string) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max >= 0 && c.n[user] >= c.max {
		return nil, false
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[user]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.n[user]--; c.n[user] <= 0 {
				delete(c.n, user)
			}
		})
	}, true
}

// userLimiters is a token bucket per user for HTTP requests. Buckets
// that have refilled completely are forgotten on the next sweep, so the
// map holds only recently active users.
type userLimiters struct {
	limit rate.Limit
	burst int

	mu        sync.Mutex
	m         map[string]*rate.Limiter
	lastSweep time.Time
}

func (u *userLimiters) allow(user string) bool {
	if u.limit == rate.Inf {
		return true
	}
	now := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]*rate.Limiter{}
	}
	if now.Sub(u.lastSweep) > time.Minute {
		for k, l := range u.m {
			if l.TokensAt(now) >= float64(u.burst) {
				delete(u.m, k)
			}
		}
		u.lastSweep = now
	}
	l := u.m[user]
	if l == nil {
		l = rate.NewLimiter(u.limit, u.burst)
		u.m[user] = l
	}
	return l.AllowN(now, 1)
}

// contentSize is what MaxPromptBytes counts for one content.
func contentSize(c host.MessageContent) int {
	n := len(c.Text) + len(c.DisplayText)
	for _, q := range c.Quotes {
		n += len(q.Text) + len(q.MessageID)
	}
	for _, a := range c.Attachments {
		n += len(a.ID) + len(a.Name) + len(a.MediaType)
	}
	return n
}

func checkContent(c *host.MessageContent, l Limits) error {
	if c == nil || contentSize(*c) <= l.MaxPromptBytes {
		return nil
	}
	return &host.Error{Code: host.CodeInvalidInput, Reason: "content_too_large",
		Message: "content exceeds " + strconv.Itoa(l.MaxPromptBytes) + " bytes (text, display text, quotes and attachment references together)"}
}

// Session settings are free-form strings for the agent; these bound them.
const (
	maxSettingKey   = 128
	maxSettingValue = 4096
)

func checkSettings(s map[string]string) error {
	for k, v := range s {
		if len(k) == 0 || len(k) > maxSettingKey || len(v) > maxSettingValue {
			return &host.Error{Code: host.CodeInvalidInput, Reason: "setting_too_large",
				Message: "setting names are 1–128 bytes and values at most 4096 bytes"}
		}
	}
	return nil
}

// retryAfter is the Retry-After header of a 429.
func retryAfter(w http.ResponseWriter) { w.Header().Set("Retry-After", "1") }
