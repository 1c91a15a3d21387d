package redisbus

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

func listed(t *testing.T, p *Presence, ws string) []string {
	t.Helper()
	blobs, err := p.List(context.Background(), ws)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, b := range blobs {
		out = append(out, string(b))
	}
	sort.Strings(out)
	return out
}

// Two replicas share presence; one that stops refreshing drops out after
// its TTL with nobody cleaning up for it; a withdrawal is immediate; each
// workspace is its own.
func TestPresenceSharedWithExpiry(t *testing.T) {
	url := redisURL(t)
	prefix := "presence-" + host.RandomID("t") + ":"
	a := newBus(t, url, prefix, "a").Presence()
	b := newBus(t, url, prefix, "b").Presence()
	ctx := context.Background()
	if err := a.Put(ctx, "w1", "ra", []byte(`alice`), 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "w1", "rb", []byte(`bob`), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, "w2", "rb", []byte(`carol`), time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := listed(t, b, "w1"); !slices.Equal(got, []string{"alice", "bob"}) {
		t.Fatalf("w1 = %q", got)
	}
	if got := listed(t, a, "w2"); !slices.Equal(got, []string{"carol"}) {
		t.Fatalf("w2 = %q", got)
	}
	time.Sleep(400 * time.Millisecond) // replica a "died": no refresh
	if got := listed(t, b, "w1"); !slices.Equal(got, []string{"bob"}) {
		t.Fatalf("after a's expiry w1 = %q", got)
	}
	if n, _ := b.b.rdb.HLen(ctx, b.key("w1")).Result(); n != 1 {
		t.Fatalf("the expired field was not removed: %d fields", n)
	}
	if err := b.Put(ctx, "w1", "rb", nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := listed(t, a, "w1"); len(got) != 0 {
		t.Fatalf("after withdrawal w1 = %q", got)
	}
}
