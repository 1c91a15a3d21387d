package hub

// maxDirtyIDs bounds a dirty set; past it the topic rereads everything.
const maxDirtyIDs = 1024

// dirtyMark is what one fact says changed. A tree mark says only the
// topic's interaction tree changed; a transcript mark only its messages.
type dirtyMark struct {
	all        bool
	tree       bool
	transcript bool
	queue      bool // only the session's queue changed (queue.go)
	session    string
	turn       string
}

func dirtyAll() dirtyMark              { return dirtyMark{all: true} }
func dirtyTree() dirtyMark             { return dirtyMark{tree: true} }
func dirtyTranscript() dirtyMark       { return dirtyMark{transcript: true} }
func dirtySession(id string) dirtyMark { return dirtyMark{session: id} }
func dirtyTurn(id string) dirtyMark    { return dirtyMark{turn: id} }

// dirtySet accumulates marks between two rereads of a topic. tree: the
// interaction tree must be reread; transcript: messages changed; rest:
// something besides the tree and the messages did.
type dirtySet struct {
	all        bool
	tree       bool
	transcript bool
	queue      bool
	rest       bool
	sessions   map[string]bool
	turns      map[string]bool
}

// treeOnly: nothing but the interaction tree changed.
func (s *dirtySet) treeOnly() bool { return s.tree && !s.transcript && !s.rest && !s.all }

// main: messages, turns or the session must be reread (not only the
// interaction tree or the queue, which are read under sideMu).
func (s *dirtySet) main() bool { return s.transcript || s.rest || s.all }

// messagesOnly: turns and the session's other fields did not change, so a
// reread need not read turns.
func (s *dirtySet) messagesOnly() bool { return !s.rest && !s.all }

func (s *dirtySet) add(m dirtyMark) {
	if m.queue {
		s.queue = true
		return
	}
	if m.tree {
		s.tree = true
		return
	}
	if m.transcript {
		s.transcript = true
		return
	}
	s.rest = true
	switch {
	case m.all:
		s.all, s.sessions, s.turns = true, nil, nil
	case s.all:
	case m.session != "":
		s.sessions = addID(s.sessions, m.session, &s.all)
	case m.turn != "":
		s.turns = addID(s.turns, m.turn, &s.all)
	}
}

func addID(m map[string]bool, id string, all *bool) map[string]bool {
	if m == nil {
		m = map[string]bool{}
	}
	m[id] = true
	if len(m) > maxDirtyIDs {
		*all = true
		return nil
	}
	return m
}

func (s *dirtySet) merge(o dirtySet) {
	if o.queue {
		s.queue = true
	}
	if o.tree {
		s.add(dirtyTree())
	}
	if o.transcript {
		s.add(dirtyTranscript())
	}
	if o.rest {
		s.rest = true
	}
	if o.all {
		s.add(dirtyAll())
		return
	}
	for id := range o.sessions {
		s.add(dirtySession(id))
	}
	for id := range o.turns {
		s.add(dirtyTurn(id))
	}
}

func (s *dirtySet) take() dirtySet {
	out := *s
	*s = dirtySet{}
	return out
}
