package acp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"
	"github.com/google/uuid"

	"github.com/ensemble-dev/ensemble/host"
)

// messageIDSpace namespaces the UUIDv5 prompt message ids derived from
// (workspace, ClientSubmitID): ACP requires UUIDs there.
var messageIDSpace = uuid.MustParse("6f1c2a8e-3b7d-5e0f-9a41-2c8d7e6b5a10")

// turn is one prompt in flight on a connection.
type turn struct {
	ref            host.TurnRef
	psid           string
	messageID      string // the ACP messageId of this exact session/prompt request
	providerTurnID string
	sink           host.TurnSink
	token          string // written-marker for watchWriter

	released    chan struct{} // closed when the fence is released (endTurn)
	releaseOnce sync.Once
	cancelOnce  sync.Once // a Host cancel's repeats (Runtime.Cancel)

	written    <-chan struct{}
	evidence   chan struct{} // closed on the agent's first update or request for this prompt
	promptDone chan struct{} // closed when session/prompt returned
	result     promptResult  // set before promptDone closes

	mu       sync.Mutex
	queue    []item
	wake     chan struct{}
	seen     bool // evidence closed
	finished bool // prompt returned; nothing more is queued or cancelled
	dropped  bool // acceptance failed or was abandoned: discard everything
	// waiters are the open permission requests of this prompt (and its
	// sub-agents); reqIDs makes their request ids unique per canonical Turn.
	waiters []*waiter
	reqIDs  map[string]int
}

// item is one provider observation waiting behind the acceptance barrier.
type item struct {
	update *acpsdk.SessionUpdate
	// child is the sub-agent provider session the update belongs to.
	child    string
	notice   string
	perm     *waiter // a permission request to report
	withdraw *waiter // a reported request the agent stopped waiting for

	// goal is an _ensemble/goal notification (goal.go).
	goal *host.GoalReport
}

type promptResult struct {
	resp acpsdk.PromptResponse
	err  error
	// lost: the connection died before the response came.
	lost bool
}

// push queues an observation for the Turn unless it was dropped; it
// reports whether the item was queued.
func (t *turn) push(it item) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.seen {
		t.seen = true
		close(t.evidence)
	}
	if t.dropped || t.finished {
		return false
	}
	t.queue = append(t.queue, it)
	select {
	case t.wake <- struct{}{}:
	default:
	}
	return true
}

func (t *turn) take() []item {
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.queue
	t.queue = nil
	return q
}

// takePlain takes the items at the head of the queue that are plain output
// of the Turn itself (see pumpState.atBarrier).
func (t *turn) takePlain() []item {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for n < len(t.queue) && t.queue[n].plain() {
		n++
	}
	head := t.queue[:n:n]
	t.queue = t.queue[n:]
	return head
}

func (t *turn) queued() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue)
}

// plain: output of the root Turn that no other sink call must precede or
// follow (no request, no goal report, no sub-agent).
func (it item) plain() bool {
	if it.perm != nil || it.withdraw != nil || it.goal != nil || it.child != "" {
		return false
	}
	if it.update == nil {
		return true // a notice
	}
	_, meta, _, _ := toolCallParts(*it.update)
	_, _, sub := subagentMeta(meta)
	return !sub
}

func (t *turn) drop() {
	t.mu.Lock()
	t.dropped = true
	t.queue = nil
	t.mu.Unlock()
	t.cancelWaiters() // nothing of this prompt becomes canonical
}

// Dispatch sends one prompt and returns once sink.Accepted succeeded, or
// with an error before that: *host.ProviderError when nothing was sent or the
// agent answered the prompt with an error, a plain error when the delivery
// outcome is unknown.
func (r *Runtime) Dispatch(ctx context.Context, req host.DispatchRequest, sink host.TurnSink) error {
	c := r.current()
	if c == nil {
		return refusedLocally("session_not_started", "no live agent connection; Start the session first")
	}
	t, err := c.beginTurn(ctx, req, sink)
	if err != nil {
		return err
	}
	res := make(chan error, 1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		c.drive(ctx, t, req, res)
	}()
	return <-res
}

// beginTurn reserves the provider session for one prompt. A previous Turn
// whose prompt is over but whose terminal is still being recorded is waited
// for: the Host may dispatch the next Turn as soon as that terminal commits.
func (c *connection) beginTurn(ctx context.Context, req host.DispatchRequest, sink host.TurnSink) (*turn, error) {
	key := sessionKey{ws: req.Ref.WorkspaceID, id: req.Ref.SessionID}
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		psid, ok := c.sessions[key]
		if !ok {
			return nil, refusedLocally("session_not_started", "the session has no live provider session; Start it first")
		}
		if req.ProviderSessionID != "" && req.ProviderSessionID != psid {
			return nil, refusedLocally("provider_session_mismatch", "the live provider session differs from the requested one")
		}
		if c.byRef[req.Ref] != nil {
			return nil, notSent("turn_in_flight", "this Turn is already in flight")
		}
		prev := c.byPSID[psid]
		if prev == nil {
			return c.newTurn(req, psid, sink), nil
		}
		if !prev.isFinished() {
			return nil, refusedLocally("session_busy", "a prompt is already running in this provider session")
		}
		c.mu.Unlock()
		select {
		case <-prev.released:
		case <-ctx.Done():
			c.mu.Lock()
			return nil, fmt.Errorf("acp: waiting for the previous turn's terminal: %w", ctx.Err())
		}
		c.mu.Lock()
	}
}

// waitReleased waits until no finished Turn holds psid; a running prompt
// is an error.
func (c *connection) waitReleased(ctx context.Context, psid string) error {
	for {
		prev := c.turnByPSID(psid)
		if prev == nil {
			return nil
		}
		if !prev.isFinished() {
			return fmt.Errorf("acp: provider session %s is still running a prompt", psid)
		}
		select {
		case <-prev.released:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// newTurn registers a Turn; c.mu is held.
func (c *connection) newTurn(req host.DispatchRequest, psid string, sink host.TurnSink) *turn {
	msgID := messageID(req)
	t := &turn{
		ref:            req.Ref,
		psid:           psid,
		messageID:      msgID,
		providerTurnID: providerTurnID(psid, msgID),
		sink:           sink,
		evidence:       make(chan struct{}),
		promptDone:     make(chan struct{}),
		wake:           make(chan struct{}, 1),
		released:       make(chan struct{}),
	}
	c.byPSID[psid] = t
	c.byRef[req.Ref] = t
	return t
}

// endTurn releases the Turn's fence: the provider session takes the next
// prompt. It runs only once the Turn's fate is reported to the Host (its
// terminal was recorded, or Dispatch returned an error and the prompt is
// over), so two prompts of one session never overlap at the provider or in
// the Host's records.
func (c *connection) endTurn(t *turn) {
	c.mu.Lock()
	if c.byPSID[t.psid] == t {
		delete(c.byPSID, t.psid)
	}
	if c.byRef[t.ref] == t {
		delete(c.byRef, t.ref)
	}
	c.mu.Unlock()
	c.removeChildren(t)
	t.finish()
	t.cancelWaiters() // the prompt is over: its requests cannot be answered
	t.releaseOnce.Do(func() { close(t.released) })
}

// finish stops queueing: after the prompt returned, nothing belongs to it.
func (t *turn) finish() {
	t.mu.Lock()
	t.finished = true
	t.mu.Unlock()
}

func (t *turn) isFinished() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.finished
}

// drive runs the Turn: the acceptance barrier (reporting to res exactly
// once), then output and the terminal. All sink calls for the Turn happen
// here, in order.
func (c *connection) drive(ctx context.Context, t *turn, req host.DispatchRequest, res chan<- error) {
	p := &pumpState{c: c, t: t, m: newMapper(), children: map[string]*childTurn{}}
	ended, err := c.acceptBarrier(ctx, p, req)
	if err != nil {
		res <- err
		return
	}
	if ended { // the terminal went with the acceptance
		c.endTurn(t)
		res <- nil
		return
	}
	res <- nil
	c.pump(p)
}

// acceptBarrier sends the prompt and binds the provider identity; ended
// reports that the Turn's terminal was recorded with it.
func (c *connection) acceptBarrier(ctx context.Context, p *pumpState, req host.DispatchRequest) (ended bool, err error) {
	t := p.t
	if err := t.sink.Observed(ctx, host.PhaseDispatched); err != nil {
		c.endTurn(t)
		return false, fmt.Errorf("acp: report dispatched: %w", err)
	}

	msgID := t.messageID
	t.token = `"messageId":"` + msgID + `"`
	written, err := c.out.watch(t.token)
	if err != nil {
		c.endTurn(t)
		return false, notSent("duplicate_submit", err.Error())
	}
	t.written = written
	prompt := acpsdk.PromptRequest{
		SessionId: acpsdk.SessionId(t.psid),
		MessageId: &msgID,
		Prompt:    promptBlocks(req.Content),
	}
	c.rt.wg.Add(1)
	go func() {
		defer c.rt.wg.Done()
		c.runPrompt(t, prompt)
	}()

	// 1. The request reached the agent's input.
	select {
	case <-written:
	case <-t.promptDone:
		select {
		case <-written:
		default:
			c.endTurn(t)
			return false, fmt.Errorf("acp: prompt not delivered (outcome unknown): %w", t.result.err)
		}
	case <-ctx.Done():
		c.abandon(t)
		return false, fmt.Errorf("acp: dispatch interrupted while writing the prompt (outcome unknown): %w", ctx.Err())
	}
	if err := t.sink.Observed(ctx, host.PhaseProviderObserved); err != nil {
		c.abandon(t)
		return false, fmt.Errorf("acp: report provider_observed: %w", err)
	}
	if err := t.sink.Observed(ctx, host.PhaseResolvingIdentity); err != nil {
		c.abandon(t)
		return false, fmt.Errorf("acp: report resolving_identity: %w", err)
	}

	// 2. Wait for the agent to take the prompt up, so an immediate error
	// response is seen as the rejection it is.
	var window <-chan time.Time
	if d := c.rt.cfg.RejectionWindow; d > 0 {
		tm := time.NewTimer(d)
		defer tm.Stop()
		window = tm.C
	} else {
		closed := make(chan time.Time)
		close(closed)
		window = closed
	}
	select {
	case <-t.evidence:
	case <-t.promptDone:
	case <-window:
	case <-ctx.Done():
		c.abandon(t)
		return false, fmt.Errorf("acp: dispatch interrupted before acceptance (outcome unknown): %w", ctx.Err())
	}
	if done(t.promptDone) && !done(t.evidence) && t.result.err != nil {
		c.endTurn(t)
		if t.result.lost {
			return false, fmt.Errorf("acp: agent connection lost before acceptance (outcome unknown): %w", t.result.err)
		}
		return false, rejection(t.result.err)
	}

	// 3. The barrier: nothing reaches the sink before this returns. What
	// the agent already sent goes with it (one commit, not two or three).
	a, tookEnd := p.atBarrier()
	if err := t.sink.Accepted(ctx, a); err != nil {
		c.abandon(t)
		var pe *host.ProviderError
		if errors.As(err, &pe) {
			return false, fmt.Errorf("acp: acceptance failed: %v", err)
		}
		return false, fmt.Errorf("acp: acceptance failed: %w", err)
	}
	return tookEnd(), nil
}

// runPrompt calls session/prompt; it blocks until the prompt ends. Its
// context is the runtime's, not the caller's: the prompt outlives Dispatch,
// and cancellation goes through session/cancel so the agent still answers
// with its own stop reason.
func (c *connection) runPrompt(t *turn, p acpsdk.PromptRequest) {
	resp, err := c.cs.Prompt(c.rt.base, p)
	c.out.unwatch(t.token)
	// The SDK hands us the response only after every update sent before
	// it was processed, so the queue is complete when this is set.
	t.result = promptResult{resp: resp, err: err, lost: err != nil && (c.isDead() || c.rt.base.Err() != nil)}
	t.finish()
	close(t.promptDone)
}

// abandon stops a Turn whose acceptance will not happen: its output is
// discarded and the agent is asked to stop once the prompt reached it. The
// cancel is sent from an owned goroutine because the prompt may still be
// blocked in the write.
// It keeps the Turn's fence until the prompt is over.
func (c *connection) abandon(t *turn) {
	t.drop()
	c.rt.wg.Add(1)
	go func() {
		defer c.rt.wg.Done()
		defer c.endTurn(t)
		select {
		case <-t.written:
		case <-t.promptDone:
			return
		}
		c.cancelUntilDone(t)
		<-t.promptDone
	}()
}

// cancelUntilDone sends session/cancel until the prompt is over, the
// connection is gone or the runtime stops. One cancel is enough for an
// agent that gets it; it is repeated, with backoff, because an agent
// built on acp-go-sdk drops a cancel it reads before its prompt handler
// (a goroutine of its own) has registered the prompt, and the abandoned
// prompt would then hold the provider session with nobody to end it.
func (c *connection) cancelUntilDone(t *turn) {
	wait := 250 * time.Millisecond
	for !done(t.promptDone) {
		ctx, cancel := context.WithTimeout(c.rt.base, sendTimeout)
		if err := c.cancelPrompt(ctx, t.psid); err != nil {
			c.rt.log.Debug("session/cancel for abandoned turn", "providerTurn", t.providerTurnID, "err", err)
		}
		cancel()
		tm := time.NewTimer(wait)
		select {
		case <-t.promptDone:
		case <-c.dead:
		case <-c.rt.base.Done():
		case <-tm.C:
			wait = min(2*wait, 8*time.Second)
			continue
		}
		tm.Stop()
		return
	}
}

// pump delivers held and new output after acceptance, then the terminal,
// and only then releases the Turn's fence. Permission requests are reported
// in order with the output; sub-agents get their own canonical Turn.
func (c *connection) pump(p *pumpState) {
	t := p.t
	defer c.endTurn(t)
	for {
		select {
		case <-t.wake:
			if !done(t.promptDone) {
				p.drain()
				continue
			}
		case <-t.promptDone:
		}
		break // the prompt ended, maybe with output still to drain
	}
	// The prompt ended: the terminal follows at once, and its settlement
	// commits this last output too (host.OutputEvent.Final).
	p.final = true
	p.drain()
	p.emit(t.sink, p.m, p.m.finish())
	term := c.terminal(t)
	p.endChildren(term)
	if err := c.report(func(ctx context.Context) error { return t.sink.Terminal(ctx, term) }); err != nil {
		c.rt.log.Warn("turn terminal not recorded", "turn", t.ref.TurnID, "err", err)
	}
	if p.lost > 0 {
		c.rt.log.Warn("turn output events not recorded", "turn", t.ref.TurnID, "count", p.lost)
	}
}

// pumpState is what pump keeps across items of one Turn.
type pumpState struct {
	c        *connection
	t        *turn
	m        *mapper
	lost     int  // output the sink refused; logged once, counted at the end
	final    bool // the prompt ended: the Turn's terminal is reported next
	children map[string]*childTurn
}

// childTurn is a sub-agent's canonical Turn, fed from its provider session.
type childTurn struct {
	ref    host.TurnRef
	sink   host.TurnSink
	m      *mapper
	toolID string // the parent's tool call that runs it
	ended  bool
}

// emit reports a Turn's output, numbering each event with the Turn's next
// sequence number once, so a retried report is applied once.
func (p *pumpState) emit(sink host.TurnSink, m *mapper, evs []host.OutputEvent) {
	for _, ev := range p.number(sink, m, evs) {
		if err := p.c.report(func(ctx context.Context) error { return sink.Output(ctx, ev) }); err != nil {
			if p.lost == 0 {
				p.c.rt.log.Warn("turn output not recorded", "turn", p.t.ref.TurnID, "key", ev.Key, "err", err)
			}
			p.lost++
		}
	}
}

// inline marks the last of evs Inline when last is set.
func inline(evs []host.OutputEvent, last bool) []host.OutputEvent {
	if last && len(evs) > 0 {
		evs[len(evs)-1].Inline = true
	}
	return evs
}

// number gives each event the Turn's next sequence number.
func (p *pumpState) number(sink host.TurnSink, m *mapper, evs []host.OutputEvent) []host.OutputEvent {
	for i := range evs {
		m.seq++
		evs[i].Seq = m.seq
		evs[i].Final = p.final && sink == p.t.sink
	}
	return evs
}

// atBarrier takes what the Turn holds when it crosses the barrier, to
// commit with the acceptance: the plain output at the head of the queue,
// and the terminal too when the prompt is over and nothing else is queued.
// A permission request, a goal report, a sub-agent's start or update, and
// everything after the first of them, stay queued for the pump, in order.
// The acceptance's More takes the same again once its transaction has read
// the Turn; ended reports whether a terminal went with it either way.
func (p *pumpState) atBarrier() (a host.Acceptance, ended func() bool) {
	var took bool
	held := func() ([]host.OutputEvent, *host.Terminal) {
		if took {
			return nil, nil
		}
		var out []host.OutputEvent
		for _, it := range p.t.takePlain() {
			if it.update != nil {
				out = append(out, p.number(p.t.sink, p.m, p.m.apply(*it.update))...)
			} else {
				out = append(out, p.number(p.t.sink, p.m, p.m.notice(it.notice))...)
			}
		}
		// After promptDone nothing more is queued (finish ran before it closed).
		if !done(p.t.promptDone) || p.t.queued() != 0 {
			return out, nil
		}
		out = append(out, p.number(p.t.sink, p.m, p.m.finish())...)
		term := p.c.terminal(p.t)
		took = true
		return out, &term
	}
	a = host.Acceptance{ProviderSessionID: p.t.psid, ProviderTurnID: p.t.providerTurnID, More: held}
	a.Output, a.Terminal = held()
	return a, func() bool { return took }
}

// The Turn's own output event that ends what drain took goes Inline: the
// pump has nothing behind it, so the sink may commit on this goroutine
// instead of waking a committer.
func (p *pumpState) drain() {
	items := p.t.take()
	for i, it := range items {
		last := i == len(items)-1
		switch {
		case it.perm != nil:
			p.interaction(it.perm)
		case it.withdraw != nil:
			p.withdraw(it.withdraw)
		case it.goal != nil:
			p.goal(*it.goal)
		case it.update != nil && it.child != "":
			if ch := p.children[it.child]; ch != nil && !ch.ended {
				p.emit(ch.sink, ch.m, ch.m.apply(*it.update))
			}
		case it.update != nil:
			p.emit(p.t.sink, p.m, inline(p.m.apply(*it.update), last))
			p.subagents(*it.update)
		default:
			p.emit(p.t.sink, p.m, inline(p.m.notice(it.notice), last))
		}
	}
}

// subagents starts a child Turn for a tool call that announces a
// sub-agent, and ends it when that tool call finishes.
func (p *pumpState) subagents(u acpsdk.SessionUpdate) {
	id, meta, status, ok := toolCallParts(u)
	if !ok {
		return
	}
	if psid, title, ok := subagentMeta(meta); ok && p.children[psid] == nil {
		var (
			ref  host.TurnRef
			sink host.TurnSink
		)
		err := p.c.report(func(ctx context.Context) error {
			var err error
			ref, sink, err = p.t.sink.Subagent(ctx, host.SubagentRequest{
				ProviderSessionID: psid, ProviderTurnID: p.t.providerTurnID + "/" + psid, Title: title})
			return err
		})
		if err != nil {
			p.c.rt.log.Warn("sub-agent not recorded; its output is dropped", "turn", p.t.ref.TurnID, "providerSession", psid, "err", err)
			p.children[psid] = &childTurn{ended: true, toolID: id}
		} else {
			p.children[psid] = &childTurn{ref: ref, sink: sink, m: newMapper(), toolID: id}
		}
	}
	if status != string(acpsdk.ToolCallStatusCompleted) && status != string(acpsdk.ToolCallStatusFailed) {
		return
	}
	for _, ch := range p.children {
		if ch.toolID == id && !ch.ended {
			term := host.Terminal{Outcome: host.OutcomeCompleted, StopReason: "end_turn"}
			if status == string(acpsdk.ToolCallStatusFailed) {
				term = host.Terminal{Outcome: host.OutcomeFailed, Reason: host.ReasonProviderError}
			}
			p.endChild(ch, term)
		}
	}
}

// toolCallParts reads a tool call's id, _meta and status from a tool-call
// update; ok is false for any other update.
func toolCallParts(u acpsdk.SessionUpdate) (id string, meta map[string]any, status string, ok bool) {
	switch {
	case u.ToolCall != nil:
		return string(u.ToolCall.ToolCallId), u.ToolCall.Meta, string(u.ToolCall.Status), true
	case u.ToolCallUpdate != nil:
		if u.ToolCallUpdate.Status != nil {
			status = string(*u.ToolCallUpdate.Status)
		}
		return string(u.ToolCallUpdate.ToolCallId), u.ToolCallUpdate.Meta, status, true
	}
	return "", nil, "", false
}

func (p *pumpState) endChild(ch *childTurn, term host.Terminal) {
	ch.ended = true
	p.emit(ch.sink, ch.m, ch.m.finish())
	if err := p.c.report(func(ctx context.Context) error { return ch.sink.Terminal(ctx, term) }); err != nil {
		p.c.rt.log.Warn("sub-agent terminal not recorded", "turn", ch.ref.TurnID, "err", err)
	}
}

// endChildren ends sub-agents still open when the prompt ends, the way
// the prompt ended.
func (p *pumpState) endChildren(term host.Terminal) {
	for _, ch := range p.children {
		if !ch.ended && ch.sink != nil {
			p.endChild(ch, term)
		}
	}
}

// interaction reports one permission request; a request that cannot be
// recorded is answered "cancelled" so the agent does not wait forever.
func (p *pumpState) interaction(w *waiter) {
	sink, ref := p.t.sink, p.t.ref
	if w.child != "" {
		ch := p.children[w.child]
		if ch == nil || ch.sink == nil || ch.ended {
			w.settle(cancelledResponse())
			return
		}
		sink, ref = ch.sink, ch.ref
	}
	w.mu.Lock()
	if w.state != waiterPending {
		w.mu.Unlock()
		return // already cancelled or withdrawn before it was reported
	}
	w.ref = host.InteractionRef{WorkspaceID: ref.WorkspaceID, SessionID: ref.SessionID, TurnID: ref.TurnID, RequestID: w.req.RequestID}
	w.mu.Unlock()
	p.c.registerWaiter(w)
	if err := p.c.report(func(ctx context.Context) error { return sink.Interaction(ctx, w.req) }); err != nil {
		p.c.rt.log.Warn("permission request not recorded; answering it cancelled", "turn", ref.TurnID, "request", w.req.RequestID, "err", err)
		p.c.unregisterWaiter(w)
		w.settle(cancelledResponse())
	}
}

func (p *pumpState) withdraw(w *waiter) {
	w.mu.Lock()
	ref := w.ref
	w.mu.Unlock()
	if ref.RequestID == "" {
		return // never reported
	}
	p.c.unregisterWaiter(w)
	sink := p.t.sink
	if w.child != "" {
		ch := p.children[w.child]
		if ch == nil || ch.sink == nil {
			return
		}
		sink = ch.sink
	}
	if err := p.c.report(func(ctx context.Context) error { return sink.Withdraw(ctx, ref.RequestID) }); err != nil {
		p.c.rt.log.Warn("withdrawn permission request not recorded", "turn", ref.TurnID, "request", ref.RequestID, "err", err)
	}
}

// report makes one sink call, retrying while the Host says the failure is
// transient (store unavailable …): a lost terminal would leave the Turn
// unsettled until recovery. Shutdown running out of time stops the retries.
func (c *connection) report(call func(context.Context) error) error {
	ctx := c.rt.base
	backoff := 50 * time.Millisecond
	for {
		err := call(ctx)
		if err == nil || !host.CodeOf(err).Retryable() || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// terminal is the Turn's terminal once its prompt ended.
func (c *connection) terminal(t *turn) host.Terminal {
	term := terminalFor(t.result)
	if term.StateLost && c.rt.shuttingDown() {
		// Still outcome unknown, but people learn it was a planned
		// restart, not a crash.
		term.StopReason = host.StopServerShutdown
	}
	return term
}

// terminalFor maps how session/prompt ended to the Turn's terminal.
func terminalFor(res promptResult) host.Terminal {
	if res.err != nil {
		if res.lost {
			return host.Terminal{StateLost: true}
		}
		return host.Terminal{Outcome: host.OutcomeFailed, Reason: host.ReasonProviderError}
	}
	stop := string(res.resp.StopReason)
	switch res.resp.StopReason {
	case acpsdk.StopReasonEndTurn:
		return host.Terminal{Outcome: host.OutcomeCompleted, StopReason: stop}
	case acpsdk.StopReasonCancelled:
		return host.Terminal{Outcome: host.OutcomeCanceled, StopReason: stop}
	case acpsdk.StopReasonMaxTokens:
		return host.Terminal{Outcome: host.OutcomeFailed, Reason: host.ReasonMaxTokens, StopReason: stop}
	case acpsdk.StopReasonRefusal:
		return host.Terminal{Outcome: host.OutcomeFailed, Reason: host.ReasonRefusal, StopReason: stop}
	case acpsdk.StopReasonMaxTurnRequests:
		return host.Terminal{Outcome: host.OutcomeFailed, Reason: "max_turn_requests", StopReason: stop}
	}
	return host.Terminal{Outcome: host.OutcomeFailed, Reason: host.ReasonProviderError, StopReason: stop}
}

// rejection turns the agent's error answer into an explicit rejection.
func rejection(err error) error {
	var re *acpsdk.RequestError
	if !errors.As(err, &re) {
		return fmt.Errorf("acp: prompt failed (outcome unknown): %w", err)
	}
	msg := re.Message
	if re.Data != nil {
		if b, mErr := json.Marshal(re.Data); mErr == nil {
			msg += " " + truncate(string(b), 300)
		}
	}
	return &host.ProviderError{Code: fmt.Sprintf("acp_%d", re.Code), Message: msg}
}

// notSent is a refusal before anything was written: the prompt certainly
// did not reach the agent, so it is as definite as a rejection.
func notSent(code, msg string) error {
	return &host.ProviderError{Code: code, Message: msg}
}

// refusedLocally is a refusal by this adapter before anything was written:
// the agent never saw the prompt and did not answer it, so it is a local
// condition (the Host keeps the claim retryable), never a provider rejection.
func refusedLocally(code, msg string) error {
	return &host.LocalError{Code: code, Message: msg}
}

// providerTurnID is the Turn's provider identity. ACP has no turn id, so
// it is Ensemble's own correlation id, named as such and bound to what the
// agent does know: its session id and the messageId of the exact
// session/prompt request. It is not an id the agent issued.
func providerTurnID(psid, msgID string) string {
	return "ensemble:" + psid + ":" + msgID
}

// messageID is the prompt's ACP message id: a UUIDv5 of (workspace,
// ClientSubmitID), or random without a submit id.
func messageID(req host.DispatchRequest) string {
	if req.ClientSubmitID == "" {
		return uuid.NewString()
	}
	return uuid.NewSHA1(messageIDSpace, []byte(req.Ref.WorkspaceID+"\x00"+req.ClientSubmitID)).String()
}

// promptBlocks renders canonical content as ACP content blocks. Quotes go
// first as quoted text; attachment bytes are not forwarded yet, so they are
// named rather than silently dropped.
func promptBlocks(mc host.MessageContent) []acpsdk.ContentBlock {
	var blocks []acpsdk.ContentBlock
	if len(mc.Quotes) > 0 {
		var b strings.Builder
		for _, q := range mc.Quotes {
			for line := range strings.SplitSeq(q.Text, "\n") {
				b.WriteString("> " + line + "\n")
			}
			b.WriteString("\n")
		}
		blocks = append(blocks, acpsdk.TextBlock(b.String()))
	}
	blocks = append(blocks, acpsdk.TextBlock(mc.Text))
	if len(mc.Attachments) > 0 {
		names := make([]string, 0, len(mc.Attachments))
		for _, a := range mc.Attachments {
			n := a.Name
			if n == "" {
				n = a.ID
			}
			names = append(names, n)
		}
		blocks = append(blocks, acpsdk.TextBlock("[attachments not available to the agent: "+strings.Join(names, ", ")+"]"))
	}
	return blocks
}

func done(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
