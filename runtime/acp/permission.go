package acp

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/ensemble-dev/ensemble/host"
)

// Interactions over ACP.
//
// session/request_permission is a request from the agent that stays open
// until the client answers it. The handler registers a waiter and queues
// the request behind the Turn's acceptance barrier like any output; the
// pump reports it to the Host (TurnSink.Interaction) in order with the
// output, and the handler blocks until one of these answers it:
//
//   - RespondInteraction (the Host's durable operation): the chosen option,
//     written with the operation id in _meta so the adapter can see the
//     exact response reach the agent's input;
//   - Cancel / Close / the end of the prompt / a failed report: "cancelled"
//     (ACP requires cancelling a prompt to answer its pending requests so);
//   - the agent itself giving up ($/cancel_request) or the connection
//     dying: the Host is told the request was withdrawn.
//
// Delivery is idempotent per operation id: a retried RespondInteraction for
// an answer already written reports delivered without writing again; one
// for a request this process does not know (it ended, or the agent process
// is not the one that asked) is authoritatively superseded.

// Ensemble's _meta conventions (under the "ensemble" key):
//
//	request_permission _meta.ensemble.kind: "question" | "plan"  (default: approval;
//	                   tool kind switch_mode also means plan)
//	request_permission _meta.ensemble.prompt: the question or plan text
//	tool_call          _meta.ensemble.subagent: {"sessionId": …, "title": …}
//	                   the tool call runs a sub-agent in its own provider session;
//	                   its completion ends the sub-agent
//	permission response _meta.ensemble.operationId: the Host's operation id
const metaKey = "ensemble"

// waiter is one open session/request_permission call.
type waiter struct {
	t     *turn
	child string // provider session id of a sub-agent, or ""
	req   host.InteractionRequest

	answer chan acpsdk.RequestPermissionResponse // buffered 1, written once

	mu      sync.Mutex
	ref     host.InteractionRef // set by the pump when reported
	state   waiterState
	opID    string
	written <-chan struct{} // the response with opID reached the agent's input
	gone    bool            // the handler returned without an answer
}

type waiterState int

const (
	waiterPending waiterState = iota
	waiterAnswering
	waiterClosed
)

// settle answers the agent once; it reports false if already answered.
func (w *waiter) settle(resp acpsdk.RequestPermissionResponse) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != waiterPending {
		return false
	}
	w.state = waiterClosed
	w.answer <- resp
	return true
}

func cancelledResponse() acpsdk.RequestPermissionResponse {
	return acpsdk.RequestPermissionResponse{
		Outcome: acpsdk.RequestPermissionOutcome{Cancelled: &acpsdk.RequestPermissionOutcomeCancelled{Outcome: "cancelled"}},
	}
}

// childWait is how long a request for a sub-agent session waits for the
// notification that announced the sub-agent (notifications and requests
// are handled by different goroutines of the SDK).
const childWait = 5 * time.Second

// RequestPermission blocks until the people watching decide, the Turn is
// cancelled, or the agent stops waiting.
func (cl *client) RequestPermission(ctx context.Context, p acpsdk.RequestPermissionRequest) (acpsdk.RequestPermissionResponse, error) {
	c := cl.c
	psid := string(p.SessionId)
	t, child := c.turnForRequest(ctx, psid)
	if t == nil {
		// No prompt of ours is running there: nobody could answer it.
		return cancelledResponse(), nil
	}
	w := &waiter{t: t, child: child, req: interactionRequest(p), answer: make(chan acpsdk.RequestPermissionResponse, 1)}
	w.req.RequestID = t.requestID(child, w.req.RequestID)
	t.addWaiter(w)
	if !t.push(item{perm: w}) {
		w.settle(cancelledResponse())
	}
	select {
	case resp := <-w.answer:
		return resp, nil
	case <-ctx.Done():
		w.mu.Lock()
		w.gone = true
		st := w.state
		if st == waiterPending {
			w.state = waiterClosed
		}
		w.mu.Unlock()
		if st == waiterPending {
			t.push(item{withdraw: w})
		}
		return acpsdk.RequestPermissionResponse{}, ctx.Err()
	}
}

// interactionRequest maps an ACP permission request to a canonical one.
func interactionRequest(p acpsdk.RequestPermissionRequest) host.InteractionRequest {
	tc := p.ToolCall
	req := host.InteractionRequest{Kind: host.InteractionApproval, RequestID: string(tc.ToolCallId)}
	tool := &host.ToolCall{ID: string(tc.ToolCallId)}
	if tc.Title != nil {
		tool.Title = *tc.Title
	}
	if tc.Kind != nil {
		tool.Kind = string(*tc.Kind)
	}
	if tc.Status != nil {
		tool.Status = string(*tc.Status)
	}
	if raw := rawJSON(tc.RawInput); raw != nil {
		tool.Input = raw
	} else if len(tc.Locations) > 0 {
		paths := make([]string, 0, len(tc.Locations))
		for _, l := range tc.Locations {
			paths = append(paths, l.Path)
		}
		tool.Input, _ = json.Marshal(map[string]any{"locations": paths})
	}
	tool.Output = toolOutput(tc.Content, tc.RawOutput)
	tool.Diffs = toolDiffs(tc.Content)
	req.Tool = tool
	req.Title = tool.Title
	if tool.Kind == string(acpsdk.ToolKindSwitchMode) {
		req.Kind, req.Prompt = host.InteractionPlan, tool.Output
	}
	if m, ok := p.Meta[metaKey].(map[string]any); ok {
		switch m["kind"] {
		case string(host.InteractionQuestion):
			req.Kind = host.InteractionQuestion
		case string(host.InteractionPlan):
			req.Kind = host.InteractionPlan
		}
		if s, ok := m["prompt"].(string); ok && s != "" {
			req.Prompt = s
		}
	}
	if req.Title == "" {
		req.Title = map[host.InteractionKind]string{
			host.InteractionApproval: "The agent asks for permission",
			host.InteractionQuestion: "The agent has a question",
			host.InteractionPlan:     "The agent proposes a plan",
		}[req.Kind]
	}
	for _, o := range p.Options {
		req.Options = append(req.Options, host.InteractionOption{ID: string(o.OptionId), Name: o.Name, Kind: string(o.Kind)})
	}
	return req
}

// requestID makes a provider request id usable and unique within the
// canonical Turn it belongs to (the Turn, or a sub-agent's Turn).
func (t *turn) requestID(child, id string) string {
	var b strings.Builder
	for _, r := range id {
		if r > 0x20 && r < 0x7f && b.Len() < 96 {
			b.WriteRune(r)
		}
	}
	base := b.String()
	if base == "" {
		base = "request"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reqIDs == nil {
		t.reqIDs = map[string]int{}
	}
	k := child + "\x00" + base
	t.reqIDs[k]++
	if n := t.reqIDs[k]; n > 1 {
		return base + "#" + strconv.Itoa(n)
	}
	return base
}

func (t *turn) addWaiter(w *waiter) {
	t.mu.Lock()
	t.waiters = append(t.waiters, w)
	t.mu.Unlock()
}

// cancelWaiters answers every open request of the Turn (and its
// sub-agents) "cancelled".
func (t *turn) cancelWaiters() {
	t.mu.Lock()
	ws := t.waiters
	t.waiters = nil
	t.mu.Unlock()
	for _, w := range ws {
		w.settle(cancelledResponse())
	}
}

// turnForRequest finds the prompt a request belongs to: the Turn running
// in psid, or the Turn whose sub-agent runs there.
func (c *connection) turnForRequest(ctx context.Context, psid string) (*turn, string) {
	if t := c.turnByPSID(psid); t != nil {
		return t, ""
	}
	deadline := time.NewTimer(childWait)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		if t := c.children[psid]; t != nil {
			c.mu.Unlock()
			return t, psid
		}
		if c.childAdded == nil {
			c.childAdded = make(chan struct{})
		}
		wake := c.childAdded
		c.mu.Unlock()
		select {
		case <-wake:
		case <-deadline.C:
			return nil, ""
		case <-ctx.Done():
			return nil, ""
		case <-c.dead:
			return nil, ""
		}
	}
}

// addChild routes a sub-agent's provider session to the Turn running it.
func (c *connection) addChild(psid string, t *turn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.children[psid] == nil {
		c.children[psid] = t
	}
	if c.childAdded != nil {
		close(c.childAdded)
		c.childAdded = nil
	}
}

func (c *connection) removeChildren(t *turn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for psid, owner := range c.children {
		if owner == t {
			delete(c.children, psid)
		}
	}
}

func (c *connection) registerWaiter(w *waiter) {
	c.mu.Lock()
	c.waiters[w.ref] = w
	c.mu.Unlock()
}

func (c *connection) unregisterWaiter(w *waiter) {
	c.mu.Lock()
	if c.waiters[w.ref] == w {
		delete(c.waiters, w.ref)
	}
	c.mu.Unlock()
}

func (c *connection) waiterFor(ref host.InteractionRef) *waiter {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiters[ref]
}

// subagentMeta reads _meta.ensemble.subagent from a tool call.
func subagentMeta(meta map[string]any) (psid, title string, ok bool) {
	m, _ := meta[metaKey].(map[string]any)
	sa, _ := m["subagent"].(map[string]any)
	psid, _ = sa["sessionId"].(string)
	title, _ = sa["title"].(string)
	return psid, title, psid != ""
}

// RespondInteraction delivers the Host's decision to the waiting request.
func (r *Runtime) RespondInteraction(ctx context.Context, d host.InteractionDelivery) (host.DeliveryReport, error) {
	if rep, ok := r.delivered.get(d.OperationID); ok {
		return rep, nil
	}
	c := r.current()
	var w *waiter
	if c != nil {
		w = c.waiterFor(d.Ref)
	}
	if w == nil {
		return goneReport(d), nil
	}
	w.mu.Lock()
	switch {
	case w.state == waiterPending:
		token := `"operationId":"` + d.OperationID + `"`
		written, err := c.out.watch(token)
		if err != nil {
			w.mu.Unlock()
			return host.DeliveryReport{}, err
		}
		w.state, w.opID, w.written = waiterAnswering, d.OperationID, written
		w.answer <- acpsdk.RequestPermissionResponse{
			Meta:    map[string]any{metaKey: map[string]any{"operationId": d.OperationID}},
			Outcome: acpsdk.RequestPermissionOutcome{Selected: &acpsdk.RequestPermissionOutcomeSelected{OptionId: acpsdk.PermissionOptionId(d.Option.ID)}},
		}
	case w.state == waiterAnswering && w.opID == d.OperationID:
		// A retry of a delivery in flight: wait for the same write.
	default:
		// Answered otherwise (cancelled) or withdrawn: it is gone.
		w.mu.Unlock()
		return goneReport(d), nil
	}
	written := w.written
	w.mu.Unlock()

	select {
	case <-written:
		c.unregisterWaiter(w)
		rep := host.DeliveryReport{Result: host.DeliveryDelivered, FollowUp: followUp(d, false)}
		r.delivered.put(d.OperationID, rep)
		return rep, nil
	case <-c.dead:
		select {
		case <-written:
			rep := host.DeliveryReport{Result: host.DeliveryDelivered, FollowUp: followUp(d, false)}
			r.delivered.put(d.OperationID, rep)
			return rep, nil
		default:
		}
		c.out.unwatch(`"operationId":"` + d.OperationID + `"`)
		return goneReport(d), nil
	case <-ctx.Done():
		return host.DeliveryReport{}, fmt.Errorf("acp: the answer is still being written to the agent: %w", ctx.Err())
	}
}

// goneReport: the provider request no longer exists here.
func goneReport(d host.InteractionDelivery) host.DeliveryReport {
	return host.DeliveryReport{Result: host.DeliverySuperseded, Reason: host.ResolutionProviderGone, FollowUp: followUp(d, true)}
}

// followUp is the provider-neutral prompt after a denial the agent could
// not be told in full: ACP carries only the option, so a message the
// person added, or a denial that never reached the request, follows as a
// prompt. An approval is never replayed: its context is gone.
func followUp(d host.InteractionDelivery, gone bool) *host.MessageContent {
	if !d.Option.Denial() {
		return nil
	}
	var p struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(d.Payload, &p)
	msg := strings.TrimSpace(p.Message)
	if !gone && msg == "" {
		return nil
	}
	who := d.AnsweredBy
	if who == "" {
		who = "The user"
	}
	var b strings.Builder
	if gone {
		fmt.Fprintf(&b, "%s declined your request %q (%s), but that request had already ended when the answer arrived. Do not do it.", who, d.Title, d.Option.Name)
	} else {
		fmt.Fprintf(&b, "%s declined your request %q (%s).", who, d.Title, d.Option.Name)
	}
	if msg != "" {
		fmt.Fprintf(&b, "\n\nThey added: %s", msg)
	}
	return &host.MessageContent{Text: b.String()}
}

// deliveredSet remembers recent delivery reports by operation id, so a
// retried delivery answers from memory instead of writing again.
type deliveredSet struct {
	mu    sync.Mutex
	m     map[string]host.DeliveryReport
	order []string
}

const maxDelivered = 4096

func (s *deliveredSet) get(id string) (host.DeliveryReport, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rep, ok := s.m[id]
	return rep, ok
}

func (s *deliveredSet) put(id string, rep host.DeliveryReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]host.DeliveryReport{}
	}
	if _, ok := s.m[id]; !ok {
		s.order = append(s.order, id)
	}
	s.m[id] = rep
	for len(s.order) > maxDelivered {
		delete(s.m, s.order[0])
		s.order = s.order[1:]
	}
}

// The client advertises neither fs nor terminal capabilities; an agent that
// calls them anyway gets "method not found".

func (cl *client) ReadTextFile(context.Context, acpsdk.ReadTextFileRequest) (acpsdk.ReadTextFileResponse, error) {
	return acpsdk.ReadTextFileResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodFsReadTextFile)
}

func (cl *client) WriteTextFile(context.Context, acpsdk.WriteTextFileRequest) (acpsdk.WriteTextFileResponse, error) {
	return acpsdk.WriteTextFileResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodFsWriteTextFile)
}

func (cl *client) CreateTerminal(context.Context, acpsdk.CreateTerminalRequest) (acpsdk.CreateTerminalResponse, error) {
	return acpsdk.CreateTerminalResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodTerminalCreate)
}

func (cl *client) KillTerminal(context.Context, acpsdk.KillTerminalRequest) (acpsdk.KillTerminalResponse, error) {
	return acpsdk.KillTerminalResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodTerminalKill)
}

func (cl *client) TerminalOutput(context.Context, acpsdk.TerminalOutputRequest) (acpsdk.TerminalOutputResponse, error) {
	return acpsdk.TerminalOutputResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodTerminalOutput)
}

func (cl *client) ReleaseTerminal(context.Context, acpsdk.ReleaseTerminalRequest) (acpsdk.ReleaseTerminalResponse, error) {
	return acpsdk.ReleaseTerminalResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodTerminalRelease)
}

func (cl *client) WaitForTerminalExit(context.Context, acpsdk.WaitForTerminalExitRequest) (acpsdk.WaitForTerminalExitResponse, error) {
	return acpsdk.WaitForTerminalExitResponse{}, acpsdk.NewMethodNotFound(acpsdk.ClientMethodTerminalWaitForExit)
}
