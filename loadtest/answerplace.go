package loadtest

import (
	"sync"
	"time"
)

// answerTail is how many of an answer's last appended chunks count as its
// end.
const answerTail = 10

// placeSplit files one watcher's appended chunks by their place in the
// answer: its 2nd to 10th chunk (early), its last answerTail (end) and
// the rest. Which chunks are last is known only when the answer ends (the
// done delta, often carrying no text), so each open answer keeps its last
// answerTail latencies until then; older ones are filed as they leave.
// The sessions' answers start and end together in the fanout, so these
// show how much of the tail the Turn boundaries hold.
type placeSplit struct {
	mu               sync.Mutex
	open             map[string][]placed // message id → its unfiled chunks, oldest first
	early, end, rest *Latency
}

type placed struct {
	place int // 1 for an answer's second chunk
	lat   time.Duration
}

func newPlaceSplit(early, end, rest *Latency) *placeSplit {
	return &placeSplit{open: map[string][]placed{}, early: early, end: end, rest: rest}
}

// add files the appended chunk at place (≥ 1) of message id.
func (p *placeSplit) add(id string, place int, lat time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := append(p.open[id], placed{place, lat})
	if len(q) > answerTail {
		p.file(q[0])
		q = q[1:]
	}
	p.open[id] = q
}

// ended files message id's unfiled chunks as its end.
func (p *placeSplit) ended(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.open[id] {
		p.end.Record(c.lat)
	}
	delete(p.open, id)
}

// flush files the chunks of answers still open by their place alone.
func (p *placeSplit) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, q := range p.open {
		for _, c := range q {
			p.file(c)
		}
		delete(p.open, id)
	}
}

func (p *placeSplit) file(c placed) {
	if c.place < 10 {
		p.early.Record(c.lat)
		return
	}
	p.rest.Record(c.lat)
}
