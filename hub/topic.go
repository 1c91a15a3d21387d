package hub

import (
	"encoding/json"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ensemble-dev/ensemble/protocol"
)

type topicKind int

const (
	kindWorkspace topicKind = iota
	kindSession
)

// topic is one event stream: a workspace's session summaries, or one
// session's summary, turns and messages. Its seq is gap-free on this hub and
// its epoch names this incarnation of the stream.
type topic struct {
	h                    *Hub
	kind                 topicKind
	name, ws, sid, epoch string

	// guarded by h.mu
	refs      int
	idleSince time.Time
	removed   atomic.Bool
	// watched: a connection registered at least once. A topic nobody ever
	// watched (a failed subscribe) is swept at once instead of lingering.
	watched atomic.Bool

	// guarded by h.dmu
	queued, running, pending bool
	dirty                    dirtySet
	// reading is the dirty set of the reread running now.
	reading dirtySet

	// readMu serializes everything that reads canonical state for this
	// topic (baseline load, reread, workspace snapshot), so state read
	// earlier is never applied after state read later. sideMu does the
	// same for the interaction tree and the queue (lock order: readMu,
	// then sideMu); a reread of those alone holds only sideMu, so a typed
	// Turn, which needs readMu, does not wait for it (typed.go).
	readMu, sideMu sync.Mutex

	// mu is the emission lock: view, seq, ring and subscribers change
	// together, so a subscriber's snapshot and seq always line up.
	mu     sync.Mutex
	seq    int64
	ring   ring
	subs   map[*Conn]struct{}
	loaded bool
	sv     sessionView
	wv     workspaceView
	// presence last emitted (presence.go); presenceSent: one was.
	presence     protocol.Presence
	presenceSent bool
	// root is the session's immutable tree root (a string), set at load.
	root atomic.Value
	// streamEpoch names the session's message history (streamEpochOf),
	// set at load.
	streamEpoch string
	// writeAfter, when set, collects the watchers whose writer an emission
	// must start, for the emitter to write after it releases mu (writeNow)
	// instead of handing each to a worker.
	writeAfter *[]*Conn
}

// treeRoot is the root session of a session topic's tree, "" before load.
func (t *topic) treeRoot() string {
	r, _ := t.root.Load().(string)
	return r
}

func newTopic(h *Hub, kind topicKind, ws, sid string, incarn uint64) *topic {
	t := &topic{h: h, kind: kind, ws: ws, sid: sid, subs: map[*Conn]struct{}{},
		epoch: h.cfg.Epoch + "." + strconv.FormatUint(incarn, 10)}
	t.ring.maxEvents, t.ring.maxBytes = h.cfg.RingEvents, h.cfg.RingBytes
	t.name = topicName(kind, ws, sid)
	return t
}

// topicName is the canonical subscription name. Ids are escaped so that a
// "/" inside an id can never make two topics share a name.
func topicName(kind topicKind, ws, sid string) string {
	if kind == kindWorkspace {
		return "workspace:" + url.PathEscape(ws)
	}
	return "session:" + url.PathEscape(ws) + "/" + url.PathEscape(sid)
}

// event is one encoded event; data is shared by every watcher.
type event struct {
	sub, epoch string
	seq        int64
	data       []byte
	// v1, when set, is what ensemble.v1 watchers get instead of data at
	// the same seq (the complete message for a closing message_delta).
	v1 []byte
	// ver is the stream position after this event (a message version at
	// which the view was exactly a committed state), 0 when it is none.
	ver int64
	// key makes the event latest-wins in a lagging watcher's queue: a newer
	// event with the same key supersedes an unsent older one. Empty: never.
	key string
}

// size is what the event holds in memory: both encodings.
func (ev *event) size() int { return len(ev.data) + len(ev.v1) }

// eventFrame is the wire event frame (the alias keeps conn.go's
// superseded frame on the same type).
type eventFrame = protocol.EventFrame

// emit encodes one event once, keeps it in the ring and queues the same
// bytes on every watcher. Caller holds t.mu.
func (t *topic) emit(kind, key string, payload any) { t.emitAt(kind, key, payload, 0) }

// emitAt emits an event that leaves the stream at position ver (0: none).
func (t *topic) emitAt(kind, key string, payload any, ver int64) {
	data, ok := t.encode(kind, payload, ver)
	if !ok {
		return
	}
	t.push(&event{data: data, ver: ver}, key)
}

// emitClose emits the append that ends a message's streaming: to
// ensemble.v2 watchers as a message_delta with done (a long answer's end
// is its last words, not the whole answer again), to ensemble.v1 watchers
// as the complete message_update they have always had. Caller holds t.mu.
func (t *topic) emitClose(d protocol.MessageDelta, m protocol.Message, ver int64) {
	d.Done = true
	data, ok := t.encode(protocol.KindMessageDelta, d, ver)
	if !ok {
		return
	}
	v1, ok := t.encode(protocol.KindMessageUpdate, protocol.MessageUpdate{Message: m}, ver)
	if !ok {
		return
	}
	t.push(&event{data: data, v1: v1, ver: ver}, "")
}

// encode encodes the next event frame of the topic.
func (t *topic) encode(kind string, payload any, ver int64) ([]byte, bool) {
	data, err := json.Marshal(eventFrame{Type: protocol.FrameEvent, Sub: t.name, Epoch: t.epoch, Seq: t.seq + 1, Kind: kind, Version: ver, Payload: payload})
	if err != nil {
		t.h.log.Error("hub: encode event", "topic", t.name, "kind", kind, "err", err)
		return nil, false
	}
	return data, true
}

// push numbers ev, keeps it in the ring and queues it on every watcher.
func (t *topic) push(ev *event, key string) {
	t.seq++
	ev.sub, ev.epoch, ev.seq = t.name, t.epoch, t.seq
	if key != "" {
		ev.key = t.name + "\x00" + key
	}
	t.ring.push(ev)
	for c := range t.subs {
		if !c.enqueueEvent(ev) {
			continue
		}
		if t.writeAfter != nil {
			*t.writeAfter = append(*t.writeAfter, c)
		} else {
			t.h.spawn(c.flush)
		}
	}
	t.h.stats.events.Add(1)
	t.h.stats.fanned.Add(int64(len(t.subs)))
}

// ring keeps the newest events for resume, bounded by count and bytes.
// evs[head:] are live; the dead prefix is compacted away in bulk.
type ring struct {
	evs                 []*event
	head                int
	bytes               int
	maxEvents, maxBytes int
}

func (r *ring) len() int { return len(r.evs) - r.head }

func (r *ring) push(ev *event) {
	r.evs = append(r.evs, ev)
	r.bytes += ev.size()
	for r.len() > 1 && (r.len() > r.maxEvents || r.bytes > r.maxBytes) {
		r.bytes -= r.evs[r.head].size()
		r.evs[r.head] = nil
		r.head++
	}
	if r.head > 64 && r.head > len(r.evs)/2 {
		r.evs = append(r.evs[:0:0], r.evs[r.head:]...)
		r.head = 0
	}
}

// since returns the events after seq, or false when some of them are no
// longer held (or seq is not from this stream).
func (r *ring) since(seq, cur int64) ([]*event, bool) {
	if seq < 0 || seq > cur {
		return nil, false
	}
	if seq == cur {
		return nil, true
	}
	if r.len() == 0 || r.evs[r.head].seq > seq+1 {
		return nil, false
	}
	i := r.head + int(seq+1-r.evs[r.head].seq)
	return append([]*event(nil), r.evs[i:]...), true
}

// after returns the events following the one that left the stream at
// position ver, or false when the ring holds no such event.
func (r *ring) after(ver int64) ([]*event, int64, bool) {
	if ver <= 0 {
		return nil, 0, false
	}
	for i := len(r.evs) - 1; i >= r.head; i-- {
		switch ev := r.evs[i]; {
		case ev.ver == ver:
			return append([]*event(nil), r.evs[i+1:]...), ev.seq, true
		case ev.ver != 0 && ev.ver < ver:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// verAt is the stream position after the event with the given seq: the
// position of the newest event at or before it that has one (0: unknown).
func (r *ring) verAt(seq int64) int64 {
	for i := len(r.evs) - 1; i >= r.head; i-- {
		if ev := r.evs[i]; ev.seq <= seq && ev.ver != 0 {
			return ev.ver
		}
	}
	return 0
}
