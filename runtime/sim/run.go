package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/coder/acp-go-sdk"
)

// run executes the steps of one answer.
type run struct {
	a     *agent
	ctx   context.Context
	sid   acp.SessionId
	rate  time.Duration // <0: no delays
	chunk int

	errorAfter int  // fail once this many words were streamed (0: never)
	stamp      bool // append "@<unix nanos>" to every answer chunk (/sim stamp)
	words      int
	chunks     int
	tools      int
	said       strings.Builder // answer text, for session/load replay
}

var errCrashed = errors.New("sim: crashed on request")

func (r *run) steps(steps []Step) error {
	for _, s := range steps {
		var err error
		switch {
		case s.Text != "":
			err = r.stream(s.Text, false)
		case s.Thought != "":
			err = r.stream(s.Thought, true)
		case s.Tool != nil:
			err = r.tool(*s.Tool)
		case s.Permission != nil:
			err = r.permission(*s.Permission)
		case s.Question != nil:
			err = r.question(*s.Question)
		case s.Plan != nil:
			err = r.plan(*s.Plan)
		case s.Subagent != nil:
			err = r.subagent(*s.Subagent)
		case s.Sleep > 0:
			err = r.sleep(time.Duration(s.Sleep))
		case s.Fail != "":
			return simError(s.Fail)
		case s.Crash:
			r.crash()
			return errCrashed
		case len(s.Checklist) > 0:
			err = r.checklist(s.Checklist)
		case s.Goal != nil:
			err = r.goal(*s.Goal)
		case s.Hang:
			// A pull point for as long as it waits.
			for {
				select {
				case <-r.ctx.Done():
					return r.ctx.Err()
				case <-r.steerSignal():
					if err := r.pullSteering(); err != nil {
						return err
					}
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// stream sends text in chunks of r.chunk words, pausing r.rate between
// chunks (not before the first, so the client sees work start at once).
func (r *run) stream(text string, thought bool) error {
	words := splitKeepSpace(text)
	for i := 0; i < len(words); i += r.chunk {
		part := strings.Join(words[i:min(i+r.chunk, len(words))], "")
		if r.chunks > 0 {
			if err := r.sleep(r.rate); err != nil {
				return err
			}
		}
		r.chunks++
		if r.stamp && !thought {
			// The emission time, taken as late as possible before sending.
			part += "@" + strconv.FormatInt(time.Now().UnixNano(), 10)
		}
		u := acp.UpdateAgentMessageText(part)
		if thought {
			u = acp.UpdateAgentThoughtText(part)
		}
		if err := r.send(u); err != nil {
			return err
		}
		if thought {
			continue
		}
		r.said.WriteString(part)
		r.words += min(r.chunk, len(words)-i)
		if r.errorAfter > 0 && r.words >= r.errorAfter {
			return simError(fmt.Sprintf("simulated error after %d words (/sim error-after)", r.errorAfter))
		}
	}
	return nil
}

func (r *run) tool(ts ToolStep) error {
	r.tools++
	id := acp.ToolCallId(fmt.Sprintf("sim-tool-%d", r.tools))
	kind := acp.ToolKind(ts.Kind)
	if kind == "" {
		kind = acp.ToolKindOther
	}
	steps := []acp.SessionUpdate{
		acp.StartToolCall(id, ts.Title, acp.WithStartKind(kind), acp.WithStartStatus(acp.ToolCallStatusPending), acp.WithStartRawInput(ts.Input)),
		acp.UpdateToolCall(id, acp.WithUpdateStatus(acp.ToolCallStatusInProgress)),
		acp.UpdateToolCall(id, acp.WithUpdateStatus(acp.ToolCallStatusCompleted),
			acp.WithUpdateContent([]acp.ToolCallContent{acp.ToolContent(acp.TextBlock(ts.Output))})),
	}
	if ts.Diff != nil {
		steps[2] = acp.UpdateToolCall(id, acp.WithUpdateStatus(acp.ToolCallStatusCompleted),
			acp.WithUpdateContent(ts.Diff.content()))
	}
	for i, u := range steps {
		if i > 0 {
			if err := r.sleep(3 * r.rate); err != nil {
				return err
			}
		}
		if err := r.send(u); err != nil {
			return err
		}
	}
	return nil
}

// permission asks for an edit and reports in text what the client chose.
func (r *run) permission(ps PermissionStep) error {
	r.tools++
	id := acp.ToolCallId(fmt.Sprintf("sim-tool-%d", r.tools))
	input := map[string]any{"path": "config.json", "content": "{\"simulated\": true}"}
	if err := r.send(acp.StartToolCall(id, ps.Title, acp.WithStartKind(acp.ToolKindEdit),
		acp.WithStartStatus(acp.ToolCallStatusPending), acp.WithStartRawInput(input))); err != nil {
		return err
	}
	options := []acp.PermissionOption{
		{Kind: acp.PermissionOptionKindAllowOnce, Name: "Allow this change", OptionId: "allow"},
		{Kind: acp.PermissionOptionKindRejectOnce, Name: "Skip this change", OptionId: "reject"},
	}
	resp, err := r.ask(acp.RequestPermissionRequest{
		SessionId: r.sid,
		ToolCall: acp.ToolCallUpdate{
			ToolCallId: id,
			Title:      acp.Ptr(ps.Title),
			Kind:       acp.Ptr(acp.ToolKindEdit),
			Status:     acp.Ptr(acp.ToolCallStatusPending),
			RawInput:   input,
			Content:    ps.Diff.content(),
		},
		Options: options,
	})
	if err != nil {
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		return err
	}
	status, text := acp.ToolCallStatusFailed, "Permission outcome: cancelled — I left the file alone."
	if sel := resp.Outcome.Selected; sel != nil {
		name := string(sel.OptionId)
		for _, o := range options {
			if o.OptionId == sel.OptionId {
				name = o.Name
			}
		}
		text = fmt.Sprintf("Permission outcome: selected %q (%s).", name, sel.OptionId)
		if sel.OptionId == "allow" {
			status = acp.ToolCallStatusCompleted
		}
	}
	if err := r.send(acp.UpdateToolCall(id, acp.WithUpdateStatus(status))); err != nil {
		return err
	}
	return r.stream(text, false)
}

// ask sends session/request_permission and logs the answer the agent
// received (the log line is how tests count deliveries to the agent).
func (r *run) ask(req acp.RequestPermissionRequest) (acp.RequestPermissionResponse, error) {
	resp, err := r.a.peer().RequestPermission(r.ctx, req)
	if err == nil {
		outcome := "cancelled"
		if sel := resp.Outcome.Selected; sel != nil {
			outcome = "selected " + string(sel.OptionId)
		}
		r.a.opts.Logger.Info("sim: permission request answered", "session", string(req.SessionId),
			"toolCall", string(req.ToolCall.ToolCallId), "outcome", outcome)
	}
	return resp, err
}

func (r *run) selected(resp acp.RequestPermissionResponse, options []acp.PermissionOption) (acp.PermissionOption, bool) {
	if sel := resp.Outcome.Selected; sel != nil {
		for _, o := range options {
			if o.OptionId == sel.OptionId {
				return o, true
			}
		}
		return acp.PermissionOption{OptionId: sel.OptionId, Name: string(sel.OptionId)}, true
	}
	return acp.PermissionOption{}, false
}

// question asks the client to pick an answer.
func (r *run) question(q QuestionStep) error {
	r.tools++
	id := acp.ToolCallId(fmt.Sprintf("sim-question-%d", r.tools))
	var options []acp.PermissionOption
	for i, a := range q.Answers {
		options = append(options, acp.PermissionOption{Kind: acp.PermissionOptionKindAllowOnce, Name: a,
			OptionId: acp.PermissionOptionId(fmt.Sprintf("answer-%d", i+1))})
	}
	resp, err := r.ask(acp.RequestPermissionRequest{
		Meta:      map[string]any{"ensemble": map[string]any{"kind": "question", "prompt": q.Text}},
		SessionId: r.sid,
		ToolCall:  acp.ToolCallUpdate{ToolCallId: id, Title: acp.Ptr(q.Text), Kind: acp.Ptr(acp.ToolKindThink)},
		Options:   options,
	})
	if err != nil {
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		return err
	}
	text := " Question outcome: cancelled — I'll pick a default myself."
	if o, ok := r.selected(resp, options); ok {
		text = fmt.Sprintf(" Question outcome: you chose %s.", o.Name)
	}
	return r.stream(text, false)
}

// plan proposes a plan and waits for a decision.
func (r *run) plan(p PlanStep) error {
	r.tools++
	id := acp.ToolCallId(fmt.Sprintf("sim-plan-%d", r.tools))
	content := []acp.ToolCallContent{acp.ToolContent(acp.TextBlock(p.Text))}
	if err := r.send(acp.StartToolCall(id, "Ready to code? (simulated plan)", acp.WithStartKind(acp.ToolKindSwitchMode),
		acp.WithStartStatus(acp.ToolCallStatusPending), acp.WithStartContent(content))); err != nil {
		return err
	}
	options := []acp.PermissionOption{
		{Kind: acp.PermissionOptionKindAllowOnce, Name: "Approve the plan", OptionId: "approve"},
		{Kind: acp.PermissionOptionKindRejectOnce, Name: "Keep planning", OptionId: "revise"},
	}
	resp, err := r.ask(acp.RequestPermissionRequest{
		Meta:      map[string]any{"ensemble": map[string]any{"kind": "plan", "prompt": p.Text}},
		SessionId: r.sid,
		ToolCall: acp.ToolCallUpdate{ToolCallId: id, Title: acp.Ptr("Ready to code? (simulated plan)"),
			Kind: acp.Ptr(acp.ToolKindSwitchMode), Status: acp.Ptr(acp.ToolCallStatusPending), Content: content},
		Options: options,
	})
	if err != nil {
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		return err
	}
	status, text := acp.ToolCallStatusFailed, " Plan outcome: cancelled — nothing was changed."
	if o, ok := r.selected(resp, options); ok {
		text = fmt.Sprintf(" Plan outcome: %s.", o.Name)
		if o.OptionId == "approve" {
			status = acp.ToolCallStatusCompleted
		}
	}
	if err := r.send(acp.UpdateToolCall(id, acp.WithUpdateStatus(status))); err != nil {
		return err
	}
	return r.stream(text, false)
}

// subagent runs steps in a sub-agent's own provider session, announced by
// a tool call of this session.
func (r *run) subagent(sa SubagentStep) error {
	r.tools++
	id := acp.ToolCallId(fmt.Sprintf("sim-subagent-%d", r.tools))
	child := acp.SessionId(fmt.Sprintf("%s-sub-%d", r.sid, r.tools))
	start := acp.StartToolCall(id, sa.Title, acp.WithStartKind(acp.ToolKindThink), acp.WithStartStatus(acp.ToolCallStatusInProgress))
	start.ToolCall.Meta = map[string]any{"ensemble": map[string]any{"subagent": map[string]any{"sessionId": string(child), "title": sa.Title}}}
	if err := r.send(start); err != nil {
		return err
	}
	sub := &run{a: r.a, ctx: r.ctx, sid: child, rate: r.rate, chunk: r.chunk}
	err := sub.steps(sa.Steps)
	status := acp.ToolCallStatusCompleted
	if err != nil {
		if r.ctx.Err() != nil {
			return r.ctx.Err()
		}
		status = acp.ToolCallStatusFailed
	}
	if err := r.send(acp.UpdateToolCall(id, acp.WithUpdateStatus(status))); err != nil {
		return err
	}
	return r.stream(fmt.Sprintf(" The sub-agent finished (%s).", status), false)
}

func (r *run) sleep(d time.Duration) error {
	if d <= 0 {
		return r.ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	// The pause is a pull point: steering is answered, then the pause
	// goes on.
	for {
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-t.C:
			return nil
		case <-r.steerSignal():
			if err := r.pullSteering(); err != nil {
				return err
			}
		}
	}
}

func (r *run) send(u acp.SessionUpdate) error {
	if err := r.ctx.Err(); err != nil {
		return err
	}
	return r.a.peer().SessionUpdate(r.ctx, acp.SessionNotification{SessionId: r.sid, Update: u})
}

func (r *run) crash() {
	r.a.opts.Logger.Warn("sim agent crashing on request (/sim crash)")
	if r.a.opts.Crash != nil {
		r.a.opts.Crash()
		return
	}
	os.Exit(3)
}

// splitKeepSpace splits s into words that keep their leading whitespace, so
// the chunks concatenate back to s exactly.
func splitKeepSpace(s string) []string {
	var out []string
	start := 0
	inWord := false
	for i, c := range s {
		space := unicode.IsSpace(c)
		if !space && !inWord && i > start && strings.TrimSpace(s[start:i]) != "" {
			out = append(out, s[start:i])
			start = i
		}
		inWord = !space
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// checklist reports an ACP plan and moves each entry through in progress
// to completed, one update at a time, as an agent working through it does.
func (r *run) checklist(items []string) error {
	entries := make([]acp.PlanEntry, len(items))
	for i, c := range items {
		entries[i] = acp.PlanEntry{Content: c, Priority: acp.PlanEntryPriorityMedium, Status: acp.PlanEntryStatusPending}
	}
	send := func() error { return r.send(acp.UpdatePlan(slices.Clone(entries)...)) }
	if err := send(); err != nil {
		return err
	}
	for i := range entries {
		for _, st := range []acp.PlanEntryStatus{acp.PlanEntryStatusInProgress, acp.PlanEntryStatusCompleted} {
			if err := r.sleep(3 * r.rate); err != nil {
				return err
			}
			entries[i].Status = st
			if err := send(); err != nil {
				return err
			}
		}
	}
	return nil
}
