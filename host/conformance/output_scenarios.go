package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// scriptRuntime is a provider that reports a fixed list of output events
// for every Turn, retrying each sink call the Host calls transient as the
// ACP adapter does, so scenarios control exactly what the agent sent.
type scriptRuntime struct {
	host.NoRuntimeCapabilities
	events []host.OutputEvent
	// afterOutput, when set, runs after each Output returned.
	afterOutput func(ref host.TurnRef, sent []host.OutputEvent)
	// sentAll, when set, is closed once every event was reported.
	sentAll chan struct{}
	// afterFirst, when set, is waited for after the first event.
	afterFirst chan struct{}
	// beforeOutput, when set, runs after acceptance with the Turn's sink.
	beforeOutput func(sink host.TurnSink)
	// held: the first held events go with the acceptance, and the terminal
	// too when that is all of them, as the ACP adapter reports what the
	// agent sent before the barrier.
	held int
	// more: the next more events go with the acceptance through its More,
	// as an agent's words that arrive while the acceptance reads the Turn,
	// and the terminal too when that is all of them.
	more int
	// pastRefusals: an output the Host refuses for good does not end the
	// stream; the rest and the terminal follow (as the ACP adapter does).
	pastRefusals bool
	// terminalErr is what the terminal's report returned.
	terminalErr error

	wg sync.WaitGroup // the streaming goroutines this runtime owns
	mu sync.Mutex
	// stopped is why a stream ended before its last event.
	stopped error
}

func (r *scriptRuntime) stopErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

func (r *scriptRuntime) Start(_ context.Context, req host.StartRequest) (host.StartResult, error) {
	return host.StartResult{ProviderSessionID: "script-" + req.SessionID, Created: true, Resumed: true}, nil
}

func (r *scriptRuntime) Dispatch(ctx context.Context, req host.DispatchRequest, sink host.TurnSink) error {
	a := host.Acceptance{ProviderSessionID: req.ProviderSessionID, ProviderTurnID: "pt-" + req.Ref.TurnID}
	n := min(r.held, len(r.events))
	a.Output = r.events[:n:n]
	end := &host.Terminal{Outcome: host.OutcomeCompleted}
	if r.held > 0 && n == len(r.events) && r.more == 0 {
		a.Terminal = end
	}
	if r.more > 0 {
		rest := r.events[n:min(n+r.more, len(r.events))]
		given := false
		a.More = func() ([]host.OutputEvent, *host.Terminal) {
			if given { // a retried transaction: nothing new since
				return nil, nil
			}
			// What More returned is part of the acceptance: a retried
			// Accepted carries it (the port's rule).
			given, a.Output = true, append(a.Output[:len(a.Output):len(a.Output)], rest...)
			if n+len(rest) == len(r.events) {
				a.Terminal = end
			}
			return rest, a.Terminal
		}
	}
	if err := retrySink(func() error { return sink.Accepted(ctx, a) }); err != nil {
		return err
	}
	n = len(a.Output)
	if n > 0 && r.afterOutput != nil {
		r.afterOutput(req.Ref, a.Output)
	}
	if a.Terminal != nil {
		if r.sentAll != nil {
			close(r.sentAll)
		}
		return nil
	}
	// The stream outlives Dispatch (whose context ends when it returns),
	// as a provider connection does.
	ctx = context.WithoutCancel(ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if r.beforeOutput != nil {
			r.beforeOutput(sink)
		}
		for i, ev := range r.events {
			if i < n {
				continue // went with the acceptance
			}
			if err := retrySink(func() error { return sink.Output(ctx, ev) }); err != nil {
				r.mu.Lock()
				r.stopped = fmt.Errorf("output %d: %w", ev.Seq, err)
				r.mu.Unlock()
				if !r.pastRefusals {
					return
				}
			}
			if r.afterOutput != nil {
				r.afterOutput(req.Ref, r.events[:i+1])
			}
			if i == 0 && r.afterFirst != nil {
				<-r.afterFirst
			}
		}
		if r.sentAll != nil {
			close(r.sentAll)
		}
		err := retrySink(func() error { return sink.Terminal(ctx, host.Terminal{Outcome: host.OutcomeCompleted}) })
		r.mu.Lock()
		r.terminalErr = err
		r.mu.Unlock()
	}()
	return nil
}

func (r *scriptRuntime) Cancel(context.Context, host.TurnRef) (host.CancelReport, error) {
	return host.CancelReport{}, nil
}
func (r *scriptRuntime) Release(context.Context, string, string) error { return nil }
func (r *scriptRuntime) Destroy(context.Context, string, string) error { return nil }
func (r *scriptRuntime) Describe() host.AgentInfo                      { return host.AgentInfo{Name: "script"} }

// Live reports no live session: every Turn goes through Start.
func (r *scriptRuntime) Live(string, string) (string, bool) { return "", false }

// retrySink repeats a sink call while the Host reports a transient failure.
func retrySink(call func() error) error {
	for attempt := 0; ; attempt++ {
		err := call()
		if err == nil || !host.CodeOf(err).Retryable() || attempt == 500 {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// useScript makes the fixture's Host dispatch to rt.
func (f *fixture) useScript(rt *scriptRuntime) {
	f.runtime.set(func(p *probeRuntime) { p.Runtime = rt })
	f.t.Cleanup(rt.wg.Wait)
}

// wantMessage is one message as the events that built it say it must be.
type wantMessage struct {
	kind host.MessageKind
	text string
	tool *host.ToolCall
}

// expected folds events into the messages they describe, by key.
func expected(evs []host.OutputEvent) (map[string]*wantMessage, []string) {
	want := map[string]*wantMessage{}
	var keys []string
	for _, ev := range evs {
		m := want[ev.Key]
		if m == nil {
			kind := ev.Kind
			if kind == "" {
				kind = host.KindText
			}
			m = &wantMessage{kind: kind}
			want[ev.Key] = m
			keys = append(keys, ev.Key)
		}
		m.text += ev.Text
		if ev.Tool != nil {
			m.tool = ev.Tool
		}
	}
	return want, keys
}

// checkTranscript compares the Turn's canonical agent messages with what
// the runtime sent: complete (prefix false) or a prefix of it.
func checkTranscript(t *testing.T, got []host.Message, turn string, sent []host.OutputEvent, prefix bool) {
	t.Helper()
	if p := transcriptProblem(got, turn, sent, prefix); p != "" {
		t.Fatal(p)
	}
}

func transcriptProblem(got []host.Message, turn string, sent []host.OutputEvent, prefix bool) string {
	want, keys := expected(sent)
	seen := map[string]bool{}
	for _, m := range got {
		if m.Role != host.RoleAgent || m.TurnID != turn {
			continue
		}
		key := strings.TrimPrefix(m.ID, turn+".")
		w := want[key]
		if w == nil {
			return fmt.Sprintf("message %s was never sent", m.ID)
		}
		seen[key] = true
		ok := m.Content.Text == w.text
		if prefix {
			ok = strings.HasPrefix(w.text, m.Content.Text)
		}
		switch {
		case !ok || m.Kind != w.kind:
			return fmt.Sprintf("message %s: canonical %q (%s), sent %q (%s), prefix=%v", key, m.Content.Text, m.Kind, w.text, w.kind, prefix)
		case !prefix && !sameTool(m.Tool, w.tool):
			return fmt.Sprintf("message %s: tool %+v, sent %+v", key, m.Tool, w.tool)
		case !prefix && m.Streaming:
			return fmt.Sprintf("message %s still streaming after the turn settled", key)
		}
	}
	if !prefix && len(seen) != len(keys) {
		return fmt.Sprintf("canonical messages %v, sent %v", seen, keys)
	}
	return ""
}

func sameTool(a, b *host.ToolCall) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// randomEvents is a random output sequence: several messages (text,
// thought, tool), tool updates, done flags, multi-byte text and surrogate
// pairs. A message closed by Done gets nothing more, as from an adapter.
func randomEvents(rng *rand.Rand) []host.OutputEvent {
	pieces := []string{"word ", "é", "😀", "𝄞 ", "naïve ", "\u2028", "chunk. ", "日本 ", "a", "  "}
	type stream struct {
		key  string
		kind host.MessageKind
		done bool
	}
	streams := []*stream{{key: "text-1", kind: host.KindText}, {key: "thought-1", kind: host.KindThought},
		{key: "tool-a", kind: host.KindToolCall}, {key: "text-2", kind: host.KindText}}
	n := 1 + rng.IntN(60)
	var evs []host.OutputEvent
	for len(evs) < n {
		s := streams[rng.IntN(len(streams))]
		if s.done {
			open := false
			for _, o := range streams {
				open = open || !o.done
			}
			if !open {
				break
			}
			continue
		}
		ev := host.OutputEvent{Seq: int64(len(evs) + 1), Key: s.key, Kind: s.kind}
		if s.kind == host.KindToolCall {
			ev.Tool = &host.ToolCall{ID: "a", Title: "run", Status: []string{"pending", "in_progress", "completed"}[rng.IntN(3)]}
		} else {
			for range 1 + rng.IntN(4) {
				ev.Text += pieces[rng.IntN(len(pieces))]
			}
		}
		if rng.IntN(12) == 0 {
			ev.Done, s.done = true, true
		}
		// An adapter marks the last of what it has queued Inline.
		ev.Inline = rng.IntN(3) == 0
		evs = append(evs, ev)
	}
	return evs
}

var OutputAmbiguousCommit = Scenario{"output/ambiguous_commit_applied_once", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	// The real agent path: every second output or settle commit loses its
	// acknowledgement, so the Host retries batches that are durable.
	var mu sync.Mutex
	var sent []host.OutputEvent
	seen := map[int64]bool{}
	f.runtime.set(func(r *probeRuntime) {
		r.wrapSink = func(k host.TurnSink) host.TurnSink {
			return &recordingSink{TurnSink: k, mu: &mu, sent: &sent, seen: seen}
		}
	})
	f.store.mu.Lock()
	f.store.sinkFault = func(n int) sinkFault { return sinkFault(n % 2 * int(sinkAmbiguous)) }
	f.store.mu.Unlock()
	tr := f.waitSettled(f.mustSend(s.ID, "amb-1", "/sim words=300 tool"))
	if tr.Outcome != host.OutcomeCompleted {
		t.Fatalf("turn must complete: %+v", tr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) < 10 {
		t.Fatalf("the agent sent only %d events", len(sent))
	}
	checkTranscript(t, f.messages(s.ID, host.MessageQuery{TurnID: tr.ID}), tr.ID, sent, false)
	if got, want := agentText(f.messages(s.ID, host.MessageQuery{TurnID: tr.ID})), wantText(sent); got != want {
		t.Fatalf("transcript differs from what the agent sent:\n got %q\nwant %q", got, want)
	}
}}

// wantText is the agent text messages' text as sent, in message order.
func wantText(sent []host.OutputEvent) string {
	want, keys := expected(sent)
	var b strings.Builder
	for _, k := range keys {
		if want[k].kind == host.KindText {
			b.WriteString(want[k].text)
		}
	}
	return b.String()
}

// recordingSink records the events a runtime reported, once per sequence
// number (a runtime retry repeats the number).
type recordingSink struct {
	host.TurnSink
	mu   *sync.Mutex
	sent *[]host.OutputEvent
	seen map[int64]bool
}

func (r *recordingSink) Output(ctx context.Context, ev host.OutputEvent) error {
	r.record(ev)
	return r.TurnSink.Output(ctx, ev)
}

// Accepted records the output held at the barrier, sent with it, and what
// More gives it.
func (r *recordingSink) Accepted(ctx context.Context, a host.Acceptance) error {
	for _, ev := range a.Output {
		r.record(ev)
	}
	seeMore(&a, func(evs []host.OutputEvent) {
		for _, ev := range evs {
			r.record(ev)
		}
	})
	return r.TurnSink.Accepted(ctx, a)
}

// seeMore wraps a's More, if it has one, so that see gets the output it
// gives before the Host does.
func seeMore(a *host.Acceptance, see func([]host.OutputEvent)) {
	more := a.More
	if more == nil {
		return
	}
	a.More = func() ([]host.OutputEvent, *host.Terminal) {
		evs, end := more()
		see(evs)
		return evs, end
	}
}

func (r *recordingSink) record(ev host.OutputEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.seen[ev.Seq] {
		r.seen[ev.Seq] = true
		*r.sent = append(*r.sent, ev)
	}
}

var OutputFaultSchedules = Scenario{"output/random_fault_schedules", func(t *testing.T, d Driver) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			f := newFixture(t, d)
			rt := &scriptRuntime{events: randomEvents(rng)}
			// Some answers start, or are all there, at the barrier.
			rt.held = []int{0, 1, len(rt.events) / 2, len(rt.events)}[seed%4]
			// And some go on while the acceptance reads the Turn (More).
			rt.more = int(seed/4) % 3
			var mu sync.Mutex
			var bad []string
			rt.afterOutput = func(ref host.TurnRef, sent []host.OutputEvent) {
				if len(sent)%5 != 0 {
					return // check a prefix every few events
				}
				p, err := f.store.ListMessages(ctx, ref.WorkspaceID, ref.SessionID, host.MessageQuery{TurnID: ref.TurnID})
				if err != nil {
					return
				}
				if problem := transcriptProblem(p.Messages, ref.TurnID, sent, true); problem != "" {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("after %d events: %s", len(sent), problem))
					mu.Unlock()
				}
			}
			f.useScript(rt)
			schedule := rand.New(rand.NewPCG(seed, 7))
			var smu sync.Mutex
			f.store.mu.Lock()
			f.store.sinkFault = func(int) sinkFault {
				smu.Lock()
				defer smu.Unlock()
				switch x := schedule.IntN(10); {
				case x < 2:
					return sinkFailBefore
				case x < 4:
					return sinkAmbiguous
				}
				return sinkCommit
			}
			f.store.mu.Unlock()
			// Some commits are never published by the fast path, as when
			// the process dies between commit and publish; the relay
			// publishes them from the outbox.
			f.obs.fail.Store(seed%3 == 0)
			s := f.createEmpty()
			tr := f.mustSend(s.ID, "p-1", "go")
			tr = f.waitSettled(tr)
			rt.wg.Wait()
			if tr.Outcome != host.OutcomeCompleted {
				t.Fatalf("turn must complete: %+v", tr)
			}
			mu.Lock()
			if len(bad) > 0 {
				t.Fatalf("canonical transcript was not a prefix of what was sent: %v", bad)
			}
			mu.Unlock()
			msgs := f.messages(s.ID, host.MessageQuery{TurnID: tr.ID})
			checkTranscript(t, msgs, tr.ID, rt.events, false)

			// The committed deltas, applied in version order, rebuild the
			// same transcript as a reread.
			f.obs.fail.Store(false)
			f.clock.Advance(time.Hour)
			if err := f.host.RelayOnce(ctx); err != nil {
				t.Fatalf("relay: %v", err)
			}
			checkDeltas(t, f.obs.transcriptDeltas(s.ID), msgs)
			checkTypedTurns(t, f, s.ID)
		})
	}
}}

// transcriptDeltas returns the session's published typed deltas.
func (o *recordingObserver) transcriptDeltas(sessionID string) []host.TranscriptDelta {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []host.TranscriptDelta
	for _, f := range o.facts {
		if f.SessionID == sessionID && f.Kind == host.FactTranscriptAppended && f.Delta != nil {
			out = append(out, *f.Delta)
		}
	}
	return out
}

// checkTypedTurns: the newest Turn each Turn's typed facts carry, and the
// newest session they carry, are what a reread gives once the session is
// quiet, so a hub that applies them shows what it would have reread.
// Faults may publish facts twice and out of order (the relay), so a fact
// counts as a hub applies it: when its Turn succeeds the newest one seen
// (host.Turn.Succeeds: by UpdatedAt, later publication winning a tie,
// never unsettled over settled), its session with it when that succeeds
// the newest session seen (host.Session.Succeeds).
func checkTypedTurns(t *testing.T, f *fixture, sessionID string) {
	t.Helper()
	ctx := context.Background()
	newest := map[string]host.Turn{}
	var session *host.Session
	for _, fa := range f.obs.sessionFacts(sessionID) {
		if fa.Turn == nil {
			if fa.Session != nil {
				t.Fatalf("a fact carries a session without its Turn: %+v", fa)
			}
			continue
		}
		if fa.Kind != host.FactSessionChanged || fa.Turn.ID != fa.TurnID || fa.Turn.SessionID != sessionID {
			t.Fatalf("typed turn fact %s/%s carries Turn %s of session %s", fa.Kind, fa.TurnID, fa.Turn.ID, fa.Turn.SessionID)
		}
		if old, ok := newest[fa.TurnID]; ok && !fa.Turn.Succeeds(old) {
			continue
		}
		newest[fa.TurnID] = *fa.Turn
		if fa.Session != nil && (session == nil || fa.Session.Succeeds(*session)) {
			session = fa.Session
		}
	}
	if len(newest) == 0 || session == nil {
		t.Fatalf("no typed turn facts published (%d turns, session %v)", len(newest), session != nil)
	}
	for id, got := range newest {
		want, err := f.host.GetTurn(ctx, got.WorkspaceID, sessionID, id)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(want)
		if string(a) != string(b) {
			t.Fatalf("typed Turn differs from a reread\n fact %s\nstore %s", a, b)
		}
	}
	want, err := f.host.GetSession(ctx, session.WorkspaceID, sessionID)
	if err != nil {
		t.Fatal(err)
	}
	want.Goal = nil // read with a session, never carried
	a, _ := json.Marshal(session)
	b, _ := json.Marshal(want)
	if string(a) != string(b) {
		t.Fatalf("typed session differs from a reread\n fact %s\nstore %s", a, b)
	}
}

// sessionFacts returns the session's published facts in publication order.
func (o *recordingObserver) sessionFacts(sessionID string) []host.Fact {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []host.Fact
	for _, f := range o.facts {
		if f.SessionID == sessionID {
			out = append(out, f)
		}
	}
	return out
}

// checkDeltas applies deltas (duplicates dropped, contiguous from version
// 0: the prompt is a typed delta too) to an empty view and compares it with
// the canonical messages, every role.
func checkDeltas(t *testing.T, deltas []host.TranscriptDelta, msgs []host.Message) {
	t.Helper()
	sort.SliceStable(deltas, func(i, j int) bool { return deltas[i].FromVersion < deltas[j].FromVersion })
	view := map[string]*host.Message{}
	var at int64
	for _, d := range deltas {
		if d.ToVersion <= at {
			continue // duplicate
		}
		if d.FromVersion != at {
			t.Fatalf("delta gap: view at %d, next delta from %d", at, d.FromVersion)
		}
		for _, c := range d.Messages {
			if c.Message != nil {
				m := *c.Message
				view[m.ID] = &m
				continue
			}
			m := view[c.ID]
			if m == nil {
				t.Fatalf("append to unknown message %s", c.ID)
			}
			if host.UTF16Len(m.Content.Text) != c.Offset {
				t.Fatalf("message %s: delta offset %d, view length %d", c.ID, c.Offset, host.UTF16Len(m.Content.Text))
			}
			m.Content.Text += c.Text
			if c.Tool != nil {
				m.Tool = c.Tool
			}
			if c.Done {
				m.Streaming = false
			}
			m.Version, m.UpdatedAt = c.Version, c.UpdatedAt
		}
		at = d.ToVersion
	}
	n := 0
	for _, m := range msgs {
		n++
		v := view[m.ID]
		if v == nil {
			t.Fatalf("message %s missing from the deltas", m.ID)
		}
		a, _ := json.Marshal(v)
		b, _ := json.Marshal(m)
		if string(a) != string(b) {
			t.Fatalf("deltas rebuild\n%s\nreread\n%s", a, b)
		}
	}
	if n != len(view) {
		t.Fatalf("deltas built %d messages, canonical has %d", len(view), n)
	}
}

// holdNextOutput holds the next output transaction open before its commit
// until hold is closed; held is closed once it is held.
func (f *fixture) holdNextOutput() (hold, held chan struct{}) {
	hold, held = make(chan struct{}), make(chan struct{})
	f.store.mu.Lock()
	f.store.holdOutput, f.store.outputHeld = hold, held
	f.store.mu.Unlock()
	return hold, held
}

var OutputBurstBatches = Scenario{"output/burst_commits_in_two_transactions", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	evs := make([]host.OutputEvent, 100)
	for i := range evs {
		evs[i] = host.OutputEvent{Seq: int64(i + 1), Key: "text-1", Kind: host.KindText, Text: fmt.Sprintf("chunk%d ", i)}
	}
	evs[len(evs)-1].Done = true
	hold, held := f.holdNextOutput()
	rt := &scriptRuntime{events: evs, sentAll: make(chan struct{}), afterFirst: held}
	f.useScript(rt)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "burst-1", "go")
	// The first output commit (the first chunk) is in flight while the
	// runtime reports the other 99.
	for _, ch := range []chan struct{}{held, rt.sentAll} {
		select {
		case <-ch:
		case <-time.After(15 * time.Second):
			cur, _ := f.host.GetTurn(ctx, ws, tr.SessionID, tr.ID)
			t.Fatalf("the burst never got going: %v (turn %+v)", rt.stopErr(), cur)
		}
	}
	close(hold)
	tr = f.waitSettled(tr)
	rt.wg.Wait()
	txs := f.store.outputTxs()
	if len(txs) != 2 {
		t.Fatalf("99 chunks queued behind one commit took %d output transactions in all, want 2: %+v", len(txs), txs)
	}
	// One message touched each time: the same statements however many
	// chunks the batch carries (the check that the turn and session are
	// as the acceptance or the previous commit left them, one append,
	// turn, session, one outbox row).
	for i, tx := range txs {
		if tx.messages != 1 || tx.calls != 5 {
			t.Fatalf("output transaction %d made %d store calls for %d messages, want 5 for 1: %+v", i+1, tx.calls, tx.messages, txs)
		}
	}
	checkTranscript(t, f.messages(s.ID, host.MessageQuery{TurnID: tr.ID}), tr.ID, evs, false)
}}

// OutputAfterAnotherWriter: an output commit checks that its Turn and
// session are as the acceptance or its previous output commit left them
// (Tx.ExpectOutput) instead of reading them; when another writer moved the
// session in between (here a message put at the next version, once after
// the acceptance and once between two chunks), the commit is made again
// with them read, so the chunk gets the version after that message and
// nothing is written twice.
var OutputAfterAnotherWriter = Scenario{"output/commit_after_another_writer_rereads", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	evs := []host.OutputEvent{
		{Seq: 1, Key: "text-1", Kind: host.KindText, Text: "one ", Inline: true},
		{Seq: 2, Key: "text-1", Kind: host.KindText, Text: "two ", Inline: true},
		{Seq: 3, Key: "text-1", Kind: host.KindText, Text: "three", Done: true, Inline: true},
	}
	var others []host.Message
	putOther := func(sessionID, turnID string) {
		err := f.store.Update(ctx, func(tx host.Tx) error {
			s, err := tx.Session(ctx, ws, sessionID)
			if err != nil {
				return err
			}
			now := time.Now().UTC()
			m := host.Message{WorkspaceID: ws, SessionID: sessionID, ID: fmt.Sprintf("other-writer-%d", len(others)+1),
				TurnID: turnID, Role: host.RoleSystem, Kind: host.KindText, Version: s.MessageVersion + 1,
				Ordinal: s.MessageVersion + 1, Content: host.MessageContent{Text: "written by someone else"},
				CreatedAt: now, UpdatedAt: now}
			if err := tx.PutMessage(ctx, m); err != nil {
				return err
			}
			others = append(others, m)
			return tx.AdvanceSession(ctx, ws, sessionID, m.Version, now)
		})
		if err != nil {
			t.Errorf("the other writer: %v", err)
		}
	}
	rt := &scriptRuntime{events: evs, sentAll: make(chan struct{})}
	// Output of an Inline event returns after its commit: the next output
	// commit would start from what this one left.
	rt.afterOutput = func(ref host.TurnRef, sent []host.OutputEvent) {
		if len(sent) == 2 {
			putOther(ref.SessionID, ref.TurnID)
		}
	}
	f.useScript(rt)
	s := f.createEmpty()
	rt.beforeOutput = func(host.TurnSink) { putOther(s.ID, "") }
	tr := f.waitSettled(f.mustSend(s.ID, "other-writer-1", "go"))
	rt.wg.Wait()
	msgs := f.messages(s.ID, host.MessageQuery{})
	checkTranscript(t, msgs, tr.ID, evs, false)
	versions := map[int64]string{}
	var agent host.Message
	for _, m := range msgs {
		if prev, ok := versions[m.Version]; ok {
			t.Fatalf("messages %s and %s share version %d", prev, m.ID, m.Version)
		}
		versions[m.Version] = m.ID
		if m.Role == host.RoleAgent {
			agent = m
		}
	}
	if len(others) != 2 || agent.Version <= others[1].Version {
		t.Fatalf("the agent message is at version %d after %d other writes (%+v): the last chunk did not follow them", agent.Version, len(others), others)
	}
	got, err := f.host.GetSession(ctx, ws, s.ID)
	if err != nil || got.MessageVersion != agent.Version {
		t.Fatalf("session message version %d (%v), want the agent message's %d", got.MessageVersion, err, agent.Version)
	}
}}

// OutputInlineCommitsOnCaller: an Inline event (the runtime has nothing
// queued behind it) commits on the caller's goroutine: Output returns only
// after its commit, and the commit is recorded by then. Without Inline,
// Output only queues (OutputBurstBatches relies on that).
var OutputInlineCommitsOnCaller = Scenario{"output/inline_event_commits_before_output_returns", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	evs := []host.OutputEvent{{Seq: 1, Key: "text-1", Kind: host.KindText, Text: "inline words", Done: true, Inline: true}}
	hold, held := f.holdNextOutput()
	rt := &scriptRuntime{events: evs, sentAll: make(chan struct{})}
	f.useScript(rt)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "inline-1", "go")
	select {
	case <-held:
	case <-time.After(15 * time.Second):
		t.Fatalf("the output commit never started: %v", rt.stopErr())
	}
	select {
	case <-rt.sentAll:
		close(hold)
		t.Fatal("Output of an Inline event returned while its commit was held")
	case <-time.After(100 * time.Millisecond):
	}
	close(hold)
	select {
	case <-rt.sentAll:
	case <-time.After(15 * time.Second):
		t.Fatalf("Output never returned after its commit was released: %v", rt.stopErr())
	}
	if txs := f.store.outputTxs(); len(txs) != 1 {
		t.Fatalf("%d output transactions recorded when Output returned, want 1: %+v", len(txs), txs)
	}
	tr = f.waitSettled(tr)
	rt.wg.Wait()
	checkTranscript(t, f.messages(s.ID, host.MessageQuery{TurnID: tr.ID}), tr.ID, evs, false)
}}

// OutputFinalWithSettlement: output the runtime marks Final (its terminal
// follows at once) is committed with the settlement, in one transaction,
// and applied once when that joint commit's acknowledgement is lost.
var OutputFinalWithSettlement = Scenario{"output/final_output_commits_with_settlement", func(t *testing.T, d Driver) {
	for _, ambiguous := range []bool{false, true} {
		t.Run(fmt.Sprintf("ambiguous=%v", ambiguous), func(t *testing.T) {
			f := newFixture(t, d)
			evs := []host.OutputEvent{
				{Seq: 1, Key: "text-1", Kind: host.KindText, Text: "the last ", Final: true},
				{Seq: 2, Key: "text-1", Kind: host.KindText, Text: "words", Final: true},
				{Seq: 3, Key: "text-2", Kind: host.KindText, Text: "still open", Final: true},
			}
			rt := &scriptRuntime{events: evs}
			f.useScript(rt)
			if ambiguous {
				f.store.loseFirstSinkAck()
			}
			s := f.createEmpty()
			tr := f.waitSettled(f.mustSend(s.ID, "final-1", "go"))
			if tr.Outcome != host.OutcomeCompleted {
				t.Fatalf("turn: %+v", tr)
			}
			// The Turn is settled in the store before the store wrapper
			// records the commit: wait for the runtime's Terminal to return.
			rt.wg.Wait()
			txs := f.store.outputTxs()
			if len(txs) != 1 || !txs[0].settles {
				t.Fatalf("final output and settlement took %d output transactions, want 1 that settles: %+v", len(txs), txs)
			}
			msgs := f.messages(s.ID, host.MessageQuery{TurnID: tr.ID})
			checkTranscript(t, msgs, tr.ID, evs, false)
			f.expectNoStreaming(s.ID)
		})
	}
}}

// OutputSettlementReadFails: a settlement that cannot read a message it
// must close fails whole, and its retry closes the message; it never
// settles the Turn with the message left streaming.
var OutputSettlementReadFails = Scenario{"output/settlement_fails_when_a_message_read_fails", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	evs := []host.OutputEvent{{Seq: 1, Key: "text-1", Kind: host.KindText, Text: "left open"}}
	rt := &scriptRuntime{events: evs}
	// Armed once the last output committed: the next transaction to read
	// a message is the settlement's closing of text-1.
	rt.afterOutput = func(host.TurnRef, []host.OutputEvent) { f.store.failMessageReads.Store(1) }
	f.useScript(rt)
	s := f.createEmpty()
	tr := f.waitSettled(f.mustSend(s.ID, "read-fails-1", "go"))
	if tr.Outcome != host.OutcomeCompleted {
		t.Fatalf("turn: %+v", tr)
	}
	if n := f.store.failMessageReads.Load(); n >= 1 {
		t.Fatalf("the settlement never read the open message (fault still armed: %d)", n)
	}
	f.expectNoStreaming(s.ID)
}}

// OutputRefusalKeepsTheTerminal: output the Host refuses for good (here a
// gap in the sequence) is reported and dropped; it does not keep the
// terminal from settling the Turn, which would otherwise stay unsettled,
// its session busy, with no runtime left to report it again.
var OutputRefusalKeepsTheTerminal = Scenario{"output/refused_output_does_not_strand_the_terminal", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	rt := &scriptRuntime{pastRefusals: true, events: []host.OutputEvent{
		{Seq: 1, Key: "text-1", Kind: host.KindText, Text: "first "},
		{Seq: 3, Key: "text-1", Kind: host.KindText, Text: "after a gap"},
	}}
	f.useScript(rt)
	s := f.createEmpty()
	tr := f.waitSettled(f.mustSend(s.ID, "gap-1", "go"))
	if tr.Outcome != host.OutcomeCompleted {
		t.Fatalf("turn: %+v", tr)
	}
	rt.wg.Wait()
	rt.mu.Lock()
	terr := rt.terminalErr
	rt.mu.Unlock()
	if terr != nil {
		t.Fatalf("terminal: %v", terr)
	}
	f.expectBusy(s.ID, false)
	f.expectNoStreaming(s.ID)
}}

var PublishNeverDelaysCommits = Scenario{"commit/publish_never_delays_commits", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.host.FlushPublish()
	before := f.obs.batchCount()
	gate := make(chan struct{})
	f.obs.gate.Store(&gate)
	// Every publication hangs, yet the whole turn commits.
	tr := f.waitSettled(f.mustSend(s.ID, "pub-1", "/sim words=40"))
	if tr.Outcome != host.OutcomeCompleted {
		t.Fatalf("turn while publication hangs: %+v", tr)
	}
	if n := f.obs.batchCount(); n != before {
		t.Fatalf("%d batches published through a closed gate", n-before)
	}
	close(gate)
	f.host.FlushPublish()
	// Then everything is published, in commit order for the session.
	var last int64
	n := 0
	for _, b := range f.obs.batchesSince(before) {
		for _, fa := range b {
			if fa.SessionID != s.ID || fa.Version == 0 {
				continue
			}
			if fa.Version < last {
				t.Fatalf("fact for version %d published after version %d", fa.Version, last)
			}
			last = fa.Version
			n++
		}
	}
	msgs := f.messages(s.ID, host.MessageQuery{})
	if n == 0 || last != msgs[len(msgs)-1].Version {
		t.Fatalf("published %d versioned facts up to %d; transcript at %d", n, last, msgs[len(msgs)-1].Version)
	}
}}

// inlineObserver is an in-process bus: it publishes on the committing
// goroutine (host.InlineObserver).
type inlineObserver struct{ *recordingObserver }

func (inlineObserver) PublishesInline() bool { return true }

// InlinePublishBeforeCommitReturns: with an observer that never waits on
// I/O, the Host publishes an idle session's facts on the committing
// goroutine, so the command returns only after they were published.
// (PublishNeverDelaysCommits: any other observer gets its own goroutine.)
var InlinePublishBeforeCommitReturns = Scenario{"commit/inline_observer_publishes_before_the_command_returns", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	obs := inlineObserver{&recordingObserver{}}
	h := host.New(host.Config{Store: f.store, Runtime: f.runtime, Observer: obs, Now: f.clock.Now})
	gate := make(chan struct{})
	obs.gate.Store(&gate)
	created := make(chan error, 1)
	go func() {
		_, err := h.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, CreatedBy: "alice"})
		created <- err
	}()
	select {
	case err := <-created:
		close(gate)
		t.Fatalf("the command returned (%v) while its facts waited to be published", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if n := obs.batchCount(); n != 1 {
		t.Fatalf("%d batches published when the command returned, want 1", n)
	}
}}

var SubagentAmbiguousCommit = Scenario{"output/subagent_retry_after_ambiguous_commit", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	var refs []host.TurnRef
	var errs []error
	rt := &scriptRuntime{events: []host.OutputEvent{{Seq: 1, Key: "text-1", Text: "done", Done: true}}}
	rt.beforeOutput = func(sink host.TurnSink) {
		// The child's commit is durable but its acknowledgement is lost;
		// the runtime retries the same report.
		var lost atomic.Bool
		f.store.onCommitted(func() bool { return lost.CompareAndSwap(false, true) })
		req := host.SubagentRequest{ProviderSessionID: "child-ps", ProviderTurnID: "child-pt", Title: "helper"}
		for range 2 {
			ref, _, err := sink.Subagent(ctx, req)
			refs, errs = append(refs, ref), append(errs, err)
		}
		f.store.onCommitted(nil)
	}
	f.useScript(rt)
	s := f.createEmpty()
	tr := f.waitSettled(f.mustSend(s.ID, "sub-1", "go"))
	rt.wg.Wait()
	if tr.Outcome != host.OutcomeCompleted {
		t.Fatalf("parent turn: %+v", tr)
	}
	if host.CodeOf(errs[0]) != host.CodeUnavailable || errs[1] != nil {
		t.Fatalf("want the lost acknowledgement, then success: %v", errs)
	}
	child, err := f.store.GetSession(ctx, ws, refs[1].SessionID)
	if err != nil || child.ParentID != s.ID {
		t.Fatalf("child session %+v: %v", child, err)
	}
	page, err := f.store.ListSessions(ctx, ws, host.SessionQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, x := range page.Sessions {
		if x.ParentID == s.ID {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d child sessions for one sub-agent (refs %v)", n, refs)
	}
}}
