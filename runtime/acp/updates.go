package acp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/ensemble-dev/ensemble/host"
)

// client is the ACP client side the agent talks to.
type client struct{ c *connection }

var _ acpsdk.Client = (*client)(nil)

// SessionUpdate routes an update to the prompt in flight in its session.
// It must not block: the SDK delivers every notification of the connection
// from one goroutine, so waiting here for one Turn's acceptance would stall
// all sessions. Updates with no prompt in flight (session/load history
// replay, command lists) are not Turn output and are dropped.
func (cl *client) SessionUpdate(_ context.Context, n acpsdk.SessionNotification) error {
	psid := string(n.SessionId)
	u := n.Update
	if t := cl.c.turnByPSID(psid); t != nil {
		t.push(item{update: &u})
		// A tool call that runs a sub-agent: route its provider session
		// to this Turn from now on (after the announcing update is queued).
		var meta map[string]any
		switch {
		case u.ToolCall != nil:
			meta = u.ToolCall.Meta
		case u.ToolCallUpdate != nil:
			meta = u.ToolCallUpdate.Meta
		}
		if child, _, ok := subagentMeta(meta); ok && child != psid {
			cl.c.addChild(child, t)
		}
		return nil
	}
	cl.c.mu.Lock()
	t := cl.c.children[psid]
	cl.c.mu.Unlock()
	if t != nil {
		t.push(item{update: &u, child: psid})
	}
	return nil
}

// mapper turns ACP updates of one Turn into host output events. Text and
// thought chunks extend the open message of their kind; anything else in
// between closes it, so the next chunk starts a new key and the transcript
// keeps the agent's order.
type mapper struct {
	counts   map[string]int // per key prefix
	open     string         // key of the open text/thought message
	openKind host.MessageKind
	tools    map[string]*host.ToolCall
	order    []string // tool ids, first seen first
	closed   map[string]bool
	seq      int64 // last OutputEvent.Seq reported for the Turn
}

func newMapper() *mapper {
	return &mapper{counts: map[string]int{}, tools: map[string]*host.ToolCall{}, closed: map[string]bool{}}
}

func (m *mapper) next(prefix string) string {
	m.counts[prefix]++
	return fmt.Sprintf("%s-%d", prefix, m.counts[prefix])
}

// closeOpen marks the open text/thought message done.
func (m *mapper) closeOpen() []host.OutputEvent {
	if m.open == "" {
		return nil
	}
	ev := host.OutputEvent{Key: m.open, Kind: m.openKind, Done: true}
	m.open, m.openKind = "", ""
	return []host.OutputEvent{ev}
}

func (m *mapper) chunk(kind host.MessageKind, prefix string, block acpsdk.ContentBlock) []host.OutputEvent {
	text := blockText(block)
	if text == "" {
		return nil
	}
	var evs []host.OutputEvent
	if m.openKind != kind {
		evs = m.closeOpen()
		m.open, m.openKind = m.next(prefix), kind
	}
	return append(evs, host.OutputEvent{Key: m.open, Kind: kind, Text: text})
}

func (m *mapper) apply(u acpsdk.SessionUpdate) []host.OutputEvent {
	switch {
	case u.AgentMessageChunk != nil:
		return m.chunk(host.KindText, "text", u.AgentMessageChunk.Content)
	case u.AgentThoughtChunk != nil:
		return m.chunk(host.KindThought, "thought", u.AgentThoughtChunk.Content)
	case u.ToolCall != nil:
		tc := u.ToolCall
		id := string(tc.ToolCallId)
		st := m.tool(id)
		st.Title = tc.Title
		st.Kind = string(tc.Kind)
		st.Status = string(tc.Status)
		if raw := rawJSON(tc.RawInput); raw != nil {
			st.Input = raw
		}
		if out := toolOutput(tc.Content, tc.RawOutput); out != "" {
			st.Output = out
		}
		if d := toolDiffs(tc.Content); d != nil {
			st.Diffs = d
		}
		return append(m.closeOpen(), m.toolEvent(id))
	case u.ToolCallUpdate != nil:
		tu := u.ToolCallUpdate
		id := string(tu.ToolCallId)
		var evs []host.OutputEvent
		if _, known := m.tools[id]; !known {
			evs = m.closeOpen() // an update for an unseen call starts it
		}
		st := m.tool(id)
		if tu.Title != nil {
			st.Title = *tu.Title
		}
		if tu.Kind != nil {
			st.Kind = string(*tu.Kind)
		}
		if tu.Status != nil {
			st.Status = string(*tu.Status)
		}
		if raw := rawJSON(tu.RawInput); raw != nil {
			st.Input = raw
		}
		if out := toolOutput(tu.Content, tu.RawOutput); out != "" {
			st.Output = out
		}
		if d := toolDiffs(tu.Content); d != nil {
			st.Diffs = d
		}
		return append(evs, m.toolEvent(id))
	case u.Plan != nil:
		var b strings.Builder
		b.WriteString("Plan:")
		for _, e := range u.Plan.Entries {
			fmt.Fprintf(&b, "\n- [%s] %s", planMark(e.Status), e.Content)
		}
		return m.standalone(host.KindNotice, "plan", b.String())
	case u.PlanUpdate != nil:
		p := u.PlanUpdate.Plan
		switch {
		case p.Markdown != nil:
			return m.standalone(host.KindNotice, "plan", "Plan:\n"+p.Markdown.Content)
		case p.Items != nil:
			var b strings.Builder
			b.WriteString("Plan:")
			for _, e := range p.Items.Entries {
				fmt.Fprintf(&b, "\n- [%s] %s", planMark(e.Status), e.Content)
			}
			return m.standalone(host.KindNotice, "plan", b.String())
		}
	}
	// user echo, command lists, modes, usage …: not transcript output.
	return nil
}

// notice is a standalone notice message from the runtime itself.
func (m *mapper) notice(text string) []host.OutputEvent {
	return m.standalone(host.KindNotice, "notice", text)
}

func (m *mapper) standalone(kind host.MessageKind, prefix, text string) []host.OutputEvent {
	return append(m.closeOpen(), host.OutputEvent{Key: m.next(prefix), Kind: kind, Text: text, Done: true})
}

// finish marks everything still open done when the prompt ended.
func (m *mapper) finish() []host.OutputEvent {
	evs := m.closeOpen()
	for _, id := range m.order {
		if !m.closed[id] {
			m.closed[id] = true
			tc := *m.tools[id]
			evs = append(evs, host.OutputEvent{Key: "tool-" + id, Kind: host.KindToolCall, Tool: &tc, Done: true})
		}
	}
	return evs
}

func (m *mapper) tool(id string) *host.ToolCall {
	st := m.tools[id]
	if st == nil {
		st = &host.ToolCall{ID: id}
		m.tools[id] = st
		m.order = append(m.order, id)
	}
	return st
}

// toolEvent reports the merged state: OutputEvent.Tool replaces the
// message's tool state, so partial updates are never sent as is.
func (m *mapper) toolEvent(id string) host.OutputEvent {
	tc := *m.tools[id]
	fin := tc.Status == string(acpsdk.ToolCallStatusCompleted) || tc.Status == string(acpsdk.ToolCallStatusFailed)
	if fin {
		m.closed[id] = true
	}
	return host.OutputEvent{Key: "tool-" + id, Kind: host.KindToolCall, Tool: &tc, Done: fin}
}

func blockText(b acpsdk.ContentBlock) string {
	switch {
	case b.Text != nil:
		return b.Text.Text
	case b.ResourceLink != nil:
		return fmt.Sprintf("[%s](%s)", b.ResourceLink.Name, b.ResourceLink.Uri)
	case b.Image != nil:
		return "[image]"
	case b.Audio != nil:
		return "[audio]"
	case b.Resource != nil:
		return "[resource]"
	}
	return ""
}

// toolOutput is the readable text of a tool's content, else its raw output.
func toolOutput(content []acpsdk.ToolCallContent, rawOutput any) string {
	var parts []string
	for _, c := range content {
		switch {
		case c.Content != nil:
			if s := blockText(c.Content.Content); s != "" {
				parts = append(parts, s)
			}
		case c.Diff != nil:
			// The text says which file; the edit itself is in Diffs.
			parts = append(parts, "edit "+c.Diff.Path)
		case c.Terminal != nil:
			parts = append(parts, "[terminal "+c.Terminal.TerminalId+"]")
		}
	}
	if len(parts) > 0 {
		return strings.Join(parts, "\n")
	}
	if raw := rawJSON(rawOutput); raw != nil {
		return string(raw)
	}
	return ""
}

// toolDiffs lists a tool's diff content (nil when it has none).
func toolDiffs(content []acpsdk.ToolCallContent) []host.ToolDiff {
	var out []host.ToolDiff
	for _, c := range content {
		if c.Diff != nil {
			out = append(out, host.ToolDiff{Path: c.Diff.Path, OldText: c.Diff.OldText, NewText: c.Diff.NewText})
		}
	}
	return out
}

func rawJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil || string(b) == "null" {
		return nil
	}
	return b
}

func planMark(s acpsdk.PlanEntryStatus) string {
	switch s {
	case acpsdk.PlanEntryStatusCompleted:
		return "x"
	case acpsdk.PlanEntryStatusInProgress:
		return "~"
	}
	return " "
}
