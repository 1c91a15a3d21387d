package redisbus

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"
)

// Presence shares opaque per-replica presence blobs for a workspace: one
// Redis hash per workspace, one field per replica, each value stamped with
// its expiry. A replica that stops writing (crashed, partitioned) drops out
// once its stamp passes, without anyone cleaning up after it; the hash
// itself expires when nobody writes at all. Replicas' clocks must agree to
// well within the TTL (they share a host or NTP).
type Presence struct {
	b *Bus
	// now is the clock stamps are compared with (tests move it).
	now func() time.Time
}

// Presence returns the bus's presence store.
func (b *Bus) Presence() *Presence { return &Presence{b: b, now: time.Now} }

func (p *Presence) key(ws string) string { return p.b.opts.Prefix + "presence:" + ws }

// Put replaces replica's blob for ws; an empty blob removes it.
func (p *Presence) Put(ctx context.Context, ws, replica string, blob []byte, ttl time.Duration) error {
	key := p.key(ws)
	if len(blob) == 0 {
		if err := p.b.rdb.HDel(ctx, key, replica).Err(); err != nil {
			return fmt.Errorf("redisbus: withdraw presence: %w", err)
		}
		return nil
	}
	until := p.now().Add(ttl).UnixMilli()
	val := append(strconv.AppendInt(nil, until, 10), '\n')
	val = append(val, blob...)
	pipe := p.b.rdb.TxPipeline()
	pipe.HSet(ctx, key, replica, val)
	pipe.PExpire(ctx, key, 2*ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisbus: put presence: %w", err)
	}
	return nil
}

// List returns every replica's unexpired blob for ws, and removes the
// expired ones it saw.
func (p *Presence) List(ctx context.Context, ws string) ([][]byte, error) {
	key := p.key(ws)
	all, err := p.b.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("redisbus: list presence: %w", err)
	}
	now := p.now().UnixMilli()
	var out [][]byte
	var stale []string
	for replica, v := range all {
		stamp, blob, ok := bytes.Cut([]byte(v), []byte{'\n'})
		until, err := strconv.ParseInt(string(stamp), 10, 64)
		if !ok || err != nil || until < now {
			stale = append(stale, replica)
			continue
		}
		out = append(out, blob)
	}
	if len(stale) > 0 {
		// Best effort: a later List retries, and a stale blob is skipped anyway.
		_ = p.b.rdb.HDel(ctx, key, stale...).Err()
	}
	return out, nil
}
