package host

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"
)

// An output batch is bounded so one transaction stays short however fast
// the agent streams.
const (
	maxBatchEvents = 256
	maxBatchBytes  = 64 << 10
)

// outputQueue holds a Turn's output between Output and its commit. There
// is no timer: while one commit is in flight the next events queue, and the
// commit after it takes them all (up to the bounds), so a burst costs a few
// transactions and quiet streaming adds at most one commit of latency.
type outputQueue struct {
	mu      sync.Mutex
	pending []OutputEvent
	running bool
	done    chan struct{} // closed when the running committer stops
	// err is why the last committer stopped with events left (retryable:
	// they stay queued) or dropped them (anything else).
	err error
}

// Output queues ev and starts a committer if none is running (a Final
// event waits for the Terminal, which commits it; an Inline event is
// committed on the caller's goroutine). It refuses
// output before this sink saw the acceptance barrier pass; the fenced
// transaction decides again from the store.
func (k *turnSink) Output(ctx context.Context, ev OutputEvent) error {
	if ev.Key == "" {
		return Errorf(CodeInternal, "output without a message key")
	}
	if ev.Seq <= 0 {
		return Errorf(CodeInternal, "output without a sequence number")
	}
	k.mu.Lock()
	accepted := k.accepted
	k.mu.Unlock()
	if !accepted {
		return errNotAccepted
	}
	q := &k.out
	q.mu.Lock()
	if q.err != nil && !CodeOf(q.err).Retryable() {
		q.mu.Unlock()
		return q.err
	}
	q.pending = append(q.pending, ev)
	if q.running || ev.Final {
		q.mu.Unlock()
		return nil
	}
	if !ev.Inline {
		k.startCommitter(ctx)
		q.mu.Unlock()
		return nil
	}
	done := k.claimCommitter()
	q.mu.Unlock()
	k.commitQueued(ctx, done) // the caller is the committer until the queue is empty
	return nil
}

// startCommitter runs a committer owned by this sink; it stops when the
// queue is empty or a commit fails. Called with q.mu held.
func (k *turnSink) startCommitter(ctx context.Context) {
	go k.commitQueued(ctx, k.claimCommitter())
}

// claimCommitter marks a committer running and returns the channel it
// closes when it stops. Called with q.mu held.
func (k *turnSink) claimCommitter() chan struct{} {
	q := &k.out
	q.running, q.done, q.err = true, make(chan struct{}), nil
	return q.done
}

func (k *turnSink) commitQueued(ctx context.Context, done chan struct{}) {
	q := &k.out
	for {
		q.mu.Lock()
		batch := nextBatch(q.pending)
		if len(batch) == 0 {
			q.running = false
			q.mu.Unlock()
			close(done)
			return
		}
		q.mu.Unlock()
		err := k.commitRetrying(ctx, batch)
		q.mu.Lock()
		if err != nil {
			q.err = err
			if !CodeOf(err).Retryable() {
				q.pending = nil
			}
			q.running = false
			q.mu.Unlock()
			close(done)
			return
		}
		q.mu.Unlock()
		k.committed(batch)
	}
}

// committed drops batch, now canonical, from the head of the queue and
// records which messages it left open. Only one writer commits queued
// events at a time (the committer, or the terminal once it stopped), so
// the batch is still the head.
func (k *turnSink) committed(batch []OutputEvent) {
	if len(batch) == 0 {
		return
	}
	q := &k.out
	q.mu.Lock()
	q.pending = q.pending[len(batch):]
	q.mu.Unlock()
	k.opened(batch)
}

// opened records which messages the committed batch left streaming.
func (k *turnSink) opened(batch []OutputEvent) {
	k.mu.Lock()
	for _, ev := range batch {
		k.open[ev.Key] = !ev.Done
	}
	k.mu.Unlock()
}

// commitRetrying retries a transient failure a few times: the batch is
// idempotent (sequence numbers), so a retry after an ambiguous commit
// applies nothing twice. Left-over failures surface through flush.
func (k *turnSink) commitRetrying(ctx context.Context, batch []OutputEvent) error {
	return retryTransient(ctx, 4, 20*time.Millisecond, func() error { return k.commitOutput(ctx, batch) })
}

// retryTransient calls fn until it succeeds, fails with a non-retryable
// error, or has been tried attempts times; the wait doubles from backoff.
func retryTransient(ctx context.Context, attempts int, backoff time.Duration, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !CodeOf(err).Retryable() || attempt == attempts {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff *= 2
	}
}

// nextBatch is the head of the queue within the batch bounds (at least one
// event, however large).
func nextBatch(pending []OutputEvent) []OutputEvent {
	size := 0
	for i, ev := range pending {
		size += len(ev.Text)
		if i > 0 && (i == maxBatchEvents || size > maxBatchBytes) {
			return pending[:i]
		}
	}
	return pending
}

// flush commits everything queued and waits for it. It returns the error
// that stopped the committer; queued events kept by a transient failure are
// retried by the next flush.
func (k *turnSink) flush(ctx context.Context) error {
	q := &k.out
	q.mu.Lock()
	if len(q.pending) > 0 && !q.running {
		k.startCommitter(ctx)
	}
	q.mu.Unlock()
	if err := k.waitCommitter(ctx); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// waitCommitter waits until the committer running now, if any, stops.
func (k *turnSink) waitCommitter(ctx context.Context) error {
	q := &k.out
	q.mu.Lock()
	done, running := q.done, q.running
	q.mu.Unlock()
	if !running {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finalBatch waits for a running committer to stop and returns what is
// still queued when it fits one batch, for the terminal to commit with the
// settlement. ok is false when the queue holds more than one batch or the
// committer stopped on an error: then the terminal flushes first. With ok
// the terminal is the queue's committer (late Output only queues) until it
// calls endFinal.
func (k *turnSink) finalBatch(ctx context.Context) (batch []OutputEvent, ok bool) {
	if k.waitCommitter(ctx) != nil {
		return nil, false
	}
	q := &k.out
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running || q.err != nil {
		return nil, false
	}
	batch = nextBatch(q.pending)
	if len(batch) != len(q.pending) {
		return nil, false
	}
	q.running, q.done = true, make(chan struct{})
	return slices.Clone(batch), true
}

// endFinal ends the terminal's turn as the queue's committer.
func (k *turnSink) endFinal() {
	q := &k.out
	q.mu.Lock()
	q.running = false
	close(q.done)
	q.mu.Unlock()
}

// flushFirst commits queued output before another sink write, so the
// transcript keeps the runtime's order. Only a transient failure stops the
// caller (the runtime retries it); output the store refused for good is
// already reported and must not block the terminal or an interaction.
func (k *turnSink) flushFirst(ctx context.Context) error {
	err := k.flush(ctx)
	if err == nil || CodeOf(err).Retryable() || errors.Is(err, context.Canceled) {
		return err
	}
	if !errors.Is(err, errTurnSettled) {
		k.h.log.Warn("turn output refused", "turn", k.ref.TurnID, "err", err)
	}
	return nil
}

// commitOutput makes one batch canonical in one fenced transaction: one
// append per message touched, the Turn (applied sequence), the session
// (message version) and one outbox row carrying the typed delta. After
// this sink's acceptance the Turn and session are checked to be as its
// last commit left them instead of read (fenceOutput); when something else
// moved them, the commit is made again with them read.
func (k *turnSink) commitOutput(ctx context.Context, batch []OutputEvent) error {
	err := k.commitOutputFenced(ctx, batch, fenceOutput)
	if errors.Is(err, ErrNotFound) { // the failed commit forgot what it checked
		err = k.commitOutputFenced(ctx, batch, fenceAccepted)
	}
	return err
}

func (k *turnSink) commitOutputFenced(ctx context.Context, batch []OutputEvent, f fence) error {
	var t Turn
	var s Session
	var lens openLens
	known := k.knownLens(f)
	err := k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		var err error
		t, s, err = k.load(ctx, tx, f)
		if err != nil {
			return err
		}
		var applied bool
		applied, lens, err = k.applyOutput(ctx, tx, emit, &t, &s, batch, known)
		if err != nil || !applied {
			return err // nothing new: a retry after an ambiguous commit
		}
		// applyOutput moved only these columns of the two rows.
		if err := tx.AdvanceTurn(ctx, t.WorkspaceID, t.SessionID, t.ID, t.AppliedSeq, t.UpdatedAt); err != nil {
			return err
		}
		return tx.AdvanceSession(ctx, s.WorkspaceID, s.ID, s.MessageVersion, s.UpdatedAt)
	})
	if err != nil {
		k.forgetWrote() // an ambiguous commit may have landed: read next time
		return err
	}
	k.mu.Lock()
	k.wrote.valid, k.wrote.t, k.wrote.s, k.wrote.lens = true, t, s, lens
	k.mu.Unlock()
	return nil
}

// knownLens is what this sink's last commit left of its open messages'
// lengths when an output commit under f may rely on it: only with
// fenceOutput, whose check (the session's message version unchanged)
// vouches that nothing wrote the transcript since.
func (k *turnSink) knownLens(f fence) openLens {
	if f != fenceOutput {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.wrote.valid {
		return nil
	}
	return k.wrote.lens
}

// forgetWrote makes the next output commit read its Turn and session.
func (k *turnSink) forgetWrote() {
	k.mu.Lock()
	k.wrote.valid = false
	k.mu.Unlock()
}

// applyOutput appends the events of batch that t has not applied yet to
// the transcript of s and advances t's applied sequence, in tx; the caller
// writes t and s when applied. Output requires the Turn durably accepted.
// known and lens are as for appendTranscript (lens nil when nothing was
// applied).
func (k *turnSink) applyOutput(ctx context.Context, tx Tx, emit func(...Fact), t *Turn, s *Session, batch []OutputEvent, known openLens) (applied bool, lens openLens, err error) {
	if t.Phase != PhaseDurablyAccepted {
		return false, nil, errNotAccepted
	}
	fresh, err := unapplied(*t, batch)
	if err != nil || len(fresh) == 0 {
		return false, nil, err
	}
	now := k.h.nowUTC()
	f, lens, err := k.h.appendTranscript(ctx, tx, s, *t, mergeOutput(fresh), now, known, t.AppliedSeq == 0)
	if err != nil {
		return false, nil, err
	}
	t.AppliedSeq, t.UpdatedAt = fresh[len(fresh)-1].Seq, now
	s.UpdatedAt = now
	emit(f)
	return true, lens, nil
}

// unapplied drops the events the Turn already applied and checks that the
// rest continue its sequence without a gap.
func unapplied(t Turn, batch []OutputEvent) ([]OutputEvent, error) {
	i := 0
	for i < len(batch) && batch[i].Seq <= t.AppliedSeq {
		i++
	}
	fresh := batch[i:]
	for j, ev := range fresh {
		if ev.Seq != t.AppliedSeq+1+int64(j) {
			return nil, &Error{Code: CodeInternal, Reason: "output_sequence_gap",
				Message: "output sequence gap for turn " + t.ID}
		}
	}
	return fresh, nil
}

// mergeOutput folds a batch into one append per message key, in the order
// the keys first appear.
func mergeOutput(evs []OutputEvent) []MessageAppend {
	var out []MessageAppend
	at := map[string]int{}
	for _, ev := range evs {
		i, ok := at[ev.Key]
		if !ok {
			kind := ev.Kind
			if kind == "" {
				kind = KindText
			}
			i = len(out)
			at[ev.Key] = i
			out = append(out, MessageAppend{ID: ev.Key, Role: RoleAgent, Kind: kind})
		}
		a := &out[i]
		a.Text += ev.Text
		if ev.Tool != nil {
			tool := *ev.Tool
			a.Tool = &tool
		}
		a.Done = a.Done || ev.Done
	}
	for i := range out {
		out[i].TextLen = UTF16Len(out[i].Text)
	}
	return out
}

// appendTranscript writes parts (message ids relative to the Turn: the
// output key) at the next versions of s and returns the transcript fact
// built from what the store wrote, and the lengths of the messages left
// streaming: known's, moved by these appends. known (nil: none) holds
// lengths the caller's fence vouches for; an append to one of them tells
// the store its offset (MessageAppend.OffsetKnown). With unwritten no
// output of t was applied before (its applied sequence, which every output
// commit moves, is 0 under the caller's fence), so every message is new
// (MessageAppend.New): output keys name the messages of t alone. The
// caller writes s.
func (h *Host) appendTranscript(ctx context.Context, tx Tx, s *Session, t Turn, parts []MessageAppend, now time.Time, known openLens, unwritten bool) (Fact, openLens, error) {
	d := TranscriptDelta{FromVersion: s.MessageVersion, At: now, Messages: make([]MessageChange, 0, len(parts))}
	lens := maps.Clone(known)
	if lens == nil {
		lens = openLens{}
	}
	for _, a := range parts {
		s.MessageVersion++
		a.WorkspaceID, a.SessionID, a.TurnID = t.WorkspaceID, t.SessionID, t.ID
		a.ID = messageID(t, a.ID)
		a.Version, a.At = s.MessageVersion, now
		a.Offset, a.OffsetKnown = known[a.ID]
		a.New = unwritten
		res, err := tx.AppendMessage(ctx, a)
		if err != nil {
			return Fact{}, nil, err
		}
		if a.Done {
			delete(lens, a.ID)
		} else {
			lens[a.ID] = res.Offset + a.TextLen
		}
		if res.Created {
			m := Message{WorkspaceID: a.WorkspaceID, SessionID: a.SessionID, ID: a.ID, TurnID: a.TurnID,
				Role: a.Role, Kind: a.Kind, Version: a.Version, Ordinal: a.Version,
				Content: MessageContent{Text: a.Text}, Tool: a.Tool, Streaming: !a.Done,
				CreatedAt: now, UpdatedAt: now}
			d.Messages = append(d.Messages, MessageChange{Message: &m})
			continue
		}
		d.Messages = append(d.Messages, MessageChange{ID: a.ID, TurnID: a.TurnID, Version: a.Version,
			Offset: res.Offset, Text: a.Text, Tool: a.Tool, Done: a.Done, UpdatedAt: now})
	}
	d.ToVersion = s.MessageVersion
	return transcriptFact(s.WorkspaceID, s.ID, d), lens, nil
}

// openLens is the UTF-16 length of each message a commit left streaming,
// by message id: where the message's next append starts.
type openLens map[string]int

// putMessages writes whole new messages (a prompt, queued entries pulled
// into a Turn, steering) at the next versions of s and returns the typed
// transcript fact built from them, so hubs apply the prompt like any chunk
// instead of rereading for it. The caller writes s.
func putMessages(ctx context.Context, tx Tx, s *Session, now time.Time, msgs ...Message) (Fact, error) {
	d := TranscriptDelta{FromVersion: s.MessageVersion, At: now, Messages: make([]MessageChange, 0, len(msgs))}
	for _, m := range msgs {
		s.MessageVersion++
		m.Version, m.Ordinal = s.MessageVersion, s.MessageVersion
		if err := tx.PutMessage(ctx, m); err != nil {
			return Fact{}, err
		}
		d.Messages = append(d.Messages, MessageChange{Message: &m})
	}
	d.ToVersion = s.MessageVersion
	return transcriptFact(s.WorkspaceID, s.ID, d), nil
}

// messageID is the canonical id of a Turn's message for an output key.
func messageID(t Turn, key string) string { return t.ID + "." + key }

// transcriptFact carries d typed, or degrades to a plain "advanced" fact
// (hubs reread) when d is too large to carry.
func transcriptFact(ws, sessionID string, d TranscriptDelta) Fact {
	f := Fact{WorkspaceID: ws, Kind: FactTranscriptAdvanced, SessionID: sessionID, Version: d.ToVersion}
	if deltaFits(d) {
		f.Kind, f.Delta = FactTranscriptAppended, &d
	}
	return f
}

// deltaFits reports whether d encodes to at most MaxDeltaBytes. Streamed
// appends, nearly every delta, are answered from a bound on their encoding
// instead of encoding them once more only to measure them (every string
// byte escaped at its widest, six bytes; every number and time at its
// widest); a delta the bound does not settle is encoded.
func deltaFits(d TranscriptDelta) bool {
	if n, ok := deltaBound(d); ok && n <= MaxDeltaBytes {
		return true
	}
	b, err := json.Marshal(d)
	return err == nil && len(b) <= MaxDeltaBytes
}

// deltaBound is an upper bound on the length of d's JSON encoding, for a
// delta of appends only (no whole message, no tool state) whose times
// encode (years 0–9999); ok is false for any other.
func deltaBound(d TranscriptDelta) (n int, ok bool) {
	const (
		// {"from":…,"to":…,"at":"…","messages":[]}: two int64s, one
		// RFC 3339 time with nanoseconds and an offset, keys, punctuation.
		outer = 160
		// One append's keys, version, offset, done, updatedAt and
		// punctuation, every value at its widest.
		change  = 192
		escaped = 6 // the widest escape of one byte: \u00XX, \ufffd, \u2028
	)
	if !encodable(d.At) {
		return 0, false
	}
	n = outer
	for _, m := range d.Messages {
		if m.Message != nil || m.Tool != nil || !encodable(m.UpdatedAt) {
			return 0, false
		}
		n += change + escaped*(len(m.ID)+len(m.TurnID)+len(m.Text))
	}
	return n, true
}

// encodable: time.Time's MarshalJSON refuses years outside 0–9999.
func encodable(t time.Time) bool { return t.Year() >= 0 && t.Year() <= 9999 }
