package redisbus

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/hub"
	"github.com/ensemble-dev/ensemble/internal/testenv"
)

var (
	_ hub.Bus       = (*Bus)(nil)
	_ host.Observer = (*Bus)(nil)
)

// patience bounds every wait for something that must happen; it is a
// liveness bound, not a performance assertion.
const patience = 15 * time.Second

// redisURL returns the shared test Redis or skips.
func redisURL(t *testing.T) string {
	t.Helper()
	u := testenv.RedisURL()
	o, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.Missing(t, "Redis", err)
	}
	return u
}

// newBus opens a bus on url in its own namespace (so tests sharing one
// Redis never see each other) and closes it at cleanup.
func newBus(t *testing.T, url, prefix, name string) *Bus {
	t.Helper()
	o, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	o.ContextTimeoutEnabled = true
	o.ClientName = name
	o.MaxRetries = -1
	b := New(redis.NewClient(o), Options{Prefix: prefix, HealthInterval: 200 * time.Millisecond,
		PublishTimeout: 300 * time.Millisecond, PublishBackoff: 50 * time.Millisecond})
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// recorder collects the facts a subscription receives.
type recorder struct {
	mu    sync.Mutex
	facts []host.Fact
	wake  chan struct{}
}

func newRecorder() *recorder { return &recorder{wake: make(chan struct{}, 1)} }

func (r *recorder) fn(fs []host.Fact) {
	r.mu.Lock()
	r.facts = append(r.facts, fs...)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *recorder) count(pred func(host.Fact) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, f := range r.facts {
		if pred(f) {
			n++
		}
	}
	return n
}

// waitFor waits until at least n recorded facts match pred.
func (r *recorder) waitFor(t *testing.T, what string, n int, pred func(host.Fact) bool) {
	t.Helper()
	deadline := time.NewTimer(patience)
	defer deadline.Stop()
	for r.count(pred) < n {
		select {
		case <-r.wake:
		case <-deadline.C:
			got := r.count(pred) // count locks r.mu itself
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("waiting for %s: got %d of %d; facts: %+v", what, got, n, r.facts)
		}
	}
}

func isResync(f host.Fact) bool { return f.Kind == host.FactResync && f.SessionID == "" }

func isSession(id string) func(host.Fact) bool {
	return func(f host.Fact) bool { return f.SessionID == id }
}

func prefix() string { return host.RandomID("t") + ":" }

func TestFanOutAcrossBuses(t *testing.T) {
	url := redisURL(t)
	p := prefix()
	a, b := newBus(t, url, p, "fan-a"), newBus(t, url, p, "fan-b")
	ra, rb, rOther := newRecorder(), newRecorder(), newRecorder()
	defer a.Subscribe("w1", ra.fn)()
	defer b.Subscribe("w1", rb.fn)()
	defer b.Subscribe("w2", rOther.fn)()
	// The first confirmation resyncs: from then on the channel is live.
	ra.waitFor(t, "a's first resync", 1, isResync)
	rb.waitFor(t, "b's first resync", 1, isResync)

	ctx := context.Background()
	for i := range 20 {
		facts := []host.Fact{{WorkspaceID: "w1", Kind: host.FactTranscriptAdvanced, SessionID: "s1", Version: int64(i + 1)}}
		if err := a.Publish(ctx, facts); err != nil {
			t.Fatal(err)
		}
	}
	rb.waitFor(t, "b receives a's facts", 20, isSession("s1"))
	// Local subscribers get each fact once: directly, not again via Redis.
	if err := b.Publish(ctx, []host.Fact{{WorkspaceID: "w1", Kind: host.FactSessionChanged, SessionID: "mark"}}); err != nil {
		t.Fatal(err)
	}
	ra.waitFor(t, "a receives b's marker", 1, isSession("mark"))
	rb.waitFor(t, "b's own marker", 1, isSession("mark"))
	if n := ra.count(isSession("s1")); n != 20 {
		t.Fatalf("a's local subscriber saw %d of its own 20 facts", n)
	}
	if n := rb.count(isSession("mark")); n != 1 {
		t.Fatalf("b saw its own fact %d times", n)
	}
	// Facts are in commit order per publisher.
	rb.mu.Lock()
	var last int64
	for _, f := range rb.facts {
		if f.SessionID == "s1" {
			if f.Version != last+1 {
				t.Fatalf("out of order: %d after %d", f.Version, last)
			}
			last = f.Version
		}
	}
	rb.mu.Unlock()
	if n := rOther.count(func(f host.Fact) bool { return f.SessionID != "" }); n != 0 {
		t.Fatalf("w2's subscriber received %d facts of w1", n)
	}
}

// numsub is how many Redis clients subscribe to channel.
// TestPublishOverlapsLocalDelivery: the other replicas' copy is on its
// way before this replica's subscribers run. A local subscriber that waits
// until the other bus has the fact would wait forever if Publish sent to
// Redis only after delivering locally.
func TestPublishOverlapsLocalDelivery(t *testing.T) {
	url := redisURL(t)
	p := prefix()
	a, b := newBus(t, url, p, "overlap-a"), newBus(t, url, p, "overlap-b")
	rb := newRecorder()
	defer b.Subscribe("w1", rb.fn)()
	ra := newRecorder()
	arrived := make(chan struct{})
	var once sync.Once
	defer a.Subscribe("w1", func(fs []host.Fact) {
		ra.fn(fs)
		if !slices.ContainsFunc(fs, isSession("s1")) {
			return
		}
		// Runs inside a.Publish: b's copy must already be travelling.
		go func() {
			for rb.count(isSession("s1")) == 0 {
				<-rb.wake
			}
			once.Do(func() { close(arrived) })
		}()
		select {
		case <-arrived:
		case <-time.After(patience):
			t.Error("b did not receive the fact while a's subscriber ran")
		}
	})()
	ra.waitFor(t, "a's first resync", 1, isResync)
	rb.waitFor(t, "b's first resync", 1, isResync)
	if err := a.Publish(context.Background(), []host.Fact{{WorkspaceID: "w1", Kind: host.FactSessionChanged, SessionID: "s1"}}); err != nil {
		t.Fatal(err)
	}
	if n := ra.count(isSession("s1")); n != 1 {
		t.Fatalf("a's subscriber saw the fact %d times, want 1", n)
	}
}

func numsub(t *testing.T, c *redis.Client, channel string) int64 {
	t.Helper()
	m, err := c.PubSubNumSub(context.Background(), channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m[channel]
}

func waitNumsub(t *testing.T, c *redis.Client, channel string, want int64) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for numsub(t, c, channel) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d subscribers, want %d", channel, numsub(t, c, channel), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSubscribesOnlyWhileWatched(t *testing.T) {
	url := redisURL(t)
	p := prefix()
	b := newBus(t, url, p, "watch")
	admin := b.Client()
	ch := p + "ws:w1"
	if n := numsub(t, admin, ch); n != 0 {
		t.Fatalf("subscribed before anyone watches: %d", n)
	}
	r1, r2 := newRecorder(), newRecorder()
	un1 := b.Subscribe("w1", r1.fn)
	un2 := b.Subscribe("w1", r2.fn)
	waitNumsub(t, admin, ch, 1) // one Redis subscription however many watchers
	un1()
	r2.waitFor(t, "resync", 1, isResync)
	if n := numsub(t, admin, ch); n != 1 {
		t.Fatalf("a remaining watcher must keep the subscription: %d", n)
	}
	un2()
	un2() // idempotent
	waitNumsub(t, admin, ch, 0)
	if b.Workspaces() != 0 {
		t.Fatalf("workspaces left: %d", b.Workspaces())
	}
	// Watching again subscribes again and resyncs again.
	r3 := newRecorder()
	defer b.Subscribe("w1", r3.fn)()
	waitNumsub(t, admin, ch, 1)
	r3.waitFor(t, "resync on the new subscription", 1, isResync)
}

// TestLateSubscriberGetsAResync: a subscriber that joins a workspace
// whose Redis subscription is already confirmed gets a resync of its own,
// as every subscriber is promised (the confirmation's went to the ones
// before it).
func TestLateSubscriberGetsAResync(t *testing.T) {
	url := redisURL(t)
	b := newBus(t, url, prefix(), "late")
	early := newRecorder()
	defer b.Subscribe("w1", early.fn)()
	early.waitFor(t, "resync on the first subscription", 1, isResync)
	late := newRecorder()
	defer b.Subscribe("w1", late.fn)()
	late.waitFor(t, "resync for the subscriber that joined after the confirmation", 1, isResync)
}

// killPubSub closes the pub/sub connection of the client named name, the
// way a Redis failover or a network blip would.
func killPubSub(t *testing.T, admin *redis.Client, name string) {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		fields := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			fields[k] = v
		}
		if fields["name"] != name || fields["sub"] == "0" || fields["sub"] == "" {
			continue
		}
		id, _ := strconv.ParseInt(fields["id"], 10, 64)
		if err := admin.ClientKillByFilter(context.Background(), "ID", strconv.FormatInt(id, 10)).Err(); err != nil {
			t.Fatal(err)
		}
		killed++
	}
	if killed == 0 {
		t.Fatalf("no pub/sub connection named %s", name)
	}
}

func TestResyncAfterForcedReconnect(t *testing.T) {
	url := redisURL(t)
	p := prefix()
	a, b := newBus(t, url, p, "kill-a"), newBus(t, url, p, host.RandomID("kill-b"))
	rb := newRecorder()
	defer b.Subscribe("w1", rb.fn)()
	defer b.Subscribe("w2", rb.fn)()
	rb.waitFor(t, "first resyncs", 2, isResync)

	killPubSub(t, a.Client(), b.Client().Options().ClientName)
	// go-redis reconnects and resubscribes silently; the bus notices the
	// confirmations and resyncs both workspaces.
	rb.waitFor(t, "resync after the reconnect", 4, isResync)
	for _, ws := range []string{"w1", "w2"} {
		if n := rb.count(func(f host.Fact) bool { return isResync(f) && f.WorkspaceID == ws }); n < 2 {
			t.Fatalf("%s resynced %d times", ws, n)
		}
	}
	if err := a.Publish(context.Background(), []host.Fact{{WorkspaceID: "w1", Kind: host.FactSessionChanged, SessionID: "after"}}); err != nil {
		t.Fatal(err)
	}
	rb.waitFor(t, "live again", 1, isSession("after"))
}

// ownRedis runs a private redis-server on a free loopback port, so the
// restart test never disturbs the shared one.
type ownRedis struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func startOwnRedis(t *testing.T, port int, dir string) *ownRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Missing(t, "redis-server", err)
	}
	if port == 0 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "",
		"--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = bufio.NewReader(out).WriteTo(discard{}) }()
	r := &ownRedis{t: t, port: port, dir: dir, cmd: cmd}
	t.Cleanup(r.kill)
	c := redis.NewClient(&redis.Options{Addr: r.addr()})
	defer c.Close()
	deadline := time.Now().Add(patience)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("own redis-server on %d never answered", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return r
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

func (r *ownRedis) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }
func (r *ownRedis) url() string  { return "redis://" + r.addr() + "/0" }

func (r *ownRedis) kill() {
	if r.cmd.Process != nil && r.cmd.ProcessState == nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
}

func TestResyncAfterRedisRestart(t *testing.T) {
	dir := t.TempDir()
	rs := startOwnRedis(t, 0, dir)
	p := prefix()
	a, b := newBus(t, rs.url(), p, "restart-a"), newBus(t, rs.url(), p, "restart-b")
	ra, rb := newRecorder(), newRecorder()
	defer a.Subscribe("w1", ra.fn)()
	defer b.Subscribe("w1", rb.fn)()
	rb.waitFor(t, "first resync", 1, isResync)
	ra.waitFor(t, "first resync", 1, isResync)

	rs.kill()
	// While Redis is gone, Publish still reaches local subscribers, fails
	// for the others within its bound, and the caller is not held up.
	ctx := context.Background()
	fact := []host.Fact{{WorkspaceID: "w1", Kind: host.FactSessionChanged, SessionID: "during"}}
	var failed bool
	for range 5 {
		if err := a.Publish(ctx, fact); err != nil {
			failed = true
		}
	}
	if !failed {
		t.Fatal("publishing to a stopped Redis must report failure so the outbox relay retries")
	}
	ra.waitFor(t, "local delivery during the outage", 5, isSession("during"))

	startOwnRedis(t, rs.port, dir)
	rb.waitFor(t, "resync after Redis returned", 2, isResync)
	ra.waitFor(t, "resync after Redis returned", 2, isResync)
	// Publish recovers once its backoff passed.
	deadline := time.Now().Add(patience)
	for {
		err := a.Publish(ctx, []host.Fact{{WorkspaceID: "w1", Kind: host.FactSessionChanged, SessionID: "after"}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish never recovered: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	rb.waitFor(t, "live after the restart", 1, isSession("after"))
	if st := b.Stats(); st.Resyncs < 2 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestCloseStopsCallbacks(t *testing.T) {
	url := redisURL(t)
	b := newBus(t, url, prefix(), "close")
	r := newRecorder()
	b.Subscribe("w1", r.fn)
	r.waitFor(t, "resync", 1, isResync)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	n := r.count(func(host.Fact) bool { return true })
	_ = b.Publish(context.Background(), []host.Fact{{WorkspaceID: "w1", Kind: host.FactSessionChanged, SessionID: "x"}})
	if got := r.count(func(host.Fact) bool { return true }); got != n {
		t.Fatalf("a closed bus delivered %d facts", got-n)
	}
}
