package hub

import (
	"hash/fnv"
	"sort"
	"strconv"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// sessionView is what a session topic last emitted: enough to diff the next
// reread, to apply the next committed delta and to answer a snapshot or a
// resume without touching the store.
type sessionView struct {
	session   *host.Session // nil: not visible (deleted)
	turns     []host.Turn   // newest first
	turnsMore bool
	// sentTurns is each turn of the window as last emitted.
	sentTurns map[string]host.Turn
	// msgs is a window of the newest changes: every message whose version
	// is above floor. Older ones are paged with message.list.
	msgs     map[string]*viewMsg
	msgBytes int
	msgsMore bool
	floor    int64
	// lastVer is the message version the view is complete up to; clean:
	// the view is exactly the committed state at lastVer (false after a
	// reread that stopped inside a commit), so lastVer is a position.
	lastVer int64
	clean   bool
	// tree is the interaction tree last emitted (nil: none read yet).
	tree *protocol.InteractionSnapshot
	// history: every interaction of the window's turns, as last read.
	history []host.Interaction
	// goal is the session's goal state with the highest Seq seen (goal.go).
	goal *host.GoalState
	// queue is the session's queue last emitted (nil: none read).
	queue *protocol.QueueState
}

// viewMsg is one message of the window. Streamed text is appended to a
// growable buffer, so applying a chunk costs O(chunk) amortized instead of
// copying the whole text again; the text as a string is built only when
// an event or a snapshot needs it, and kept until the next append.
// m.Content.Text is kept empty.
type viewMsg struct {
	m   host.Message
	str string // the text, when len(str) == n
	buf []byte // nil until the first append; then buf[:n] is the text
	n   int    // bytes of text
	u16 int    // UTF-16 length of the text: the offset of the next append
}

func newViewMsg(m host.Message) *viewMsg {
	v := &viewMsg{str: m.Content.Text, n: len(m.Content.Text), u16: host.UTF16Len(m.Content.Text)}
	m.Content.Text = ""
	v.m = m
	return v
}

// text is the message's text (cached until the next append).
func (v *viewMsg) text() string {
	if len(v.str) != v.n {
		v.str = string(v.buf[:v.n])
	}
	return v.str
}

// appended is a copy of v with piece appended. The buffer may be shared
// with v, which keeps its own length, so v still reads its own text.
func (v *viewMsg) appended(piece string) *viewMsg {
	w := *v
	if w.buf == nil {
		w.buf = make([]byte, v.n, max(2*(v.n+len(piece)), 64))
		copy(w.buf, v.str)
	}
	w.buf = append(w.buf[:v.n], piece...)
	w.n += len(piece)
	w.u16 += host.UTF16Len(piece)
	return &w
}

// message is the complete message (a copy).
func (v *viewMsg) message() host.Message {
	m := v.m
	m.Content.Text = v.text()
	return m
}

func (v *viewMsg) size() int {
	n := 256 + v.n + len(v.m.Content.DisplayText)
	if v.m.Tool != nil {
		n += len(v.m.Tool.Input) + len(v.m.Tool.Output)
	}
	return n
}

// putLocked replaces (or adds) a message of the window.
func (sv *sessionView) put(v *viewMsg) {
	if old := sv.msgs[v.m.ID]; old != nil {
		sv.msgBytes -= old.size()
	}
	sv.msgs[v.m.ID] = v
	sv.msgBytes += v.size()
}

// trimLocked evicts the oldest changes from the message window until it
// fits, keeping at least one message.
func (t *topic) trimLocked() {
	sv, cfg := &t.sv, t.h.cfg
	if len(sv.msgs) <= cfg.MessageWindow && sv.msgBytes <= cfg.MessageWindowBytes {
		return
	}
	all := sv.sorted()
	for len(all) > 1 && (len(all) > cfg.MessageWindow || sv.msgBytes > cfg.MessageWindowBytes) {
		sv.msgBytes -= all[0].size()
		delete(sv.msgs, all[0].m.ID)
		sv.floor = max(sv.floor, all[0].m.Version)
		all = all[1:]
		sv.msgsMore = true
	}
}

func (sv *sessionView) sorted() []*viewMsg {
	out := make([]*viewMsg, 0, len(sv.msgs))
	for _, v := range sv.msgs {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].m.Version < out[j].m.Version })
	return out
}

// messagesAfter returns the window's messages changed after version,
// ascending by version.
func (sv *sessionView) messagesAfter(version int64) []host.Message {
	out := []host.Message{}
	for _, v := range sv.sorted() {
		if v.m.Version > version {
			out = append(out, v.message())
		}
	}
	return out
}

// position is the view's durable stream position, nil when the view is not
// at a commit boundary.
func (t *topic) positionLocked() *protocol.Position {
	if !t.sv.clean {
		return nil
	}
	return &protocol.Position{Epoch: t.streamEpoch, Version: t.sv.lastVer}
}

// sessionSnapshotLocked answers a session subscribe from the view.
func (t *topic) sessionSnapshotLocked() (protocol.SessionSnapshot, error) {
	sv := &t.sv
	if sv.session == nil {
		return protocol.SessionSnapshot{}, host.Errorf(host.CodeNotFound, "session %s not found", t.sid)
	}
	var agent *protocol.AgentInfo
	if a := t.h.agent(); a != nil {
		w := protocol.FromAgentInfo(*a)
		agent = &w
	}
	return protocol.SessionSnapshot{Session: protocol.FromSession(*sv.session), Turns: nonNil(protocol.FromTurns(sv.turns)),
		TurnsHasMore: sv.turnsMore, Messages: protocol.FromMessages(sv.messagesAfter(-1)), MessagesHasMore: sv.msgsMore,
		InteractionTree: sv.tree, Interactions: nonNil(protocol.FromInteractions(sv.history)), Presence: t.presenceLocked(),
		Agent: agent, Goal: t.goalLocked(), Queue: sv.queue}, nil
}

// goalLocked is the session's goal as the wire carries it (nil: it never
// had one). Caller holds mu.
func (t *topic) goalLocked() *protocol.GoalState {
	if t.sv.goal == nil {
		return nil
	}
	g := protocol.FromGoalState(*t.sv.goal)
	return &g
}

// AgentReader (Config.Agent) says what the agent attests now (the Host
// does; it reads the runtime's last observation and starts nothing).
type AgentReader interface {
	Agent() host.AgentInfo
}

// agent is what the agent attests now, when Config.Agent is set.
func (h *Hub) agent() *host.AgentInfo {
	if h.cfg.Agent == nil {
		return nil
	}
	a := h.cfg.Agent.Agent()
	return &a
}

// streamEpochOf names a session's message history. Versions are canonical
// and never reused within one history, so a position (epoch, version) means
// the same thing on every replica. Nothing in Ensemble rewrites a session's
// history today, so the epoch is fixed by the session's identity and
// creation; an operation that rewrites history must change it (and clients
// then start from a snapshot).
func streamEpochOf(s host.Session) string {
	h := fnv.New64a()
	h.Write([]byte(s.WorkspaceID))
	h.Write([]byte{0})
	h.Write([]byte(s.ID))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, s.CreatedAt.UnixMicro(), 10))
	return "h1." + strconv.FormatUint(h.Sum64(), 36)
}
