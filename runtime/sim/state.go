package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
)

// Durable sessions. With Options.StateDir set, the sim keeps each session
// in one small JSON file in that directory, as real ACP agents keep theirs
// on disk, so session/load works after the agent (process) restarts. The
// file is replaced atomically (temp file, fsync, rename) when the session
// is created and after each exchange; an exchange cut short by a crash is
// simply not there.

// sessionIDPattern is the sim's own session id alphabet (see NewSession).
// Nothing else is ever used in a file name: a hostile id cannot name a
// path outside the state directory.
var sessionIDPattern = regexp.MustCompile(`^sim-[0-9a-f]{16}$`)

// validSessionID reports whether id is one the sim could have issued.
func validSessionID(id string) bool { return sessionIDPattern.MatchString(id) }

// stateFile is the on-disk form of a session.
type stateFile struct {
	// Agent labels the file: it is the simulator's, not a model's.
	Agent     string          `json:"agent"`
	Simulated bool            `json:"simulated"`
	SessionID string          `json:"sessionId"`
	Cwd       string          `json:"cwd"`
	History   []stateExchange `json:"history"`
}

type stateExchange struct {
	ID    string `json:"id,omitempty"`
	User  string `json:"user"`
	Agent string `json:"agent"`
}

// statePath is the file of session id, or "" when there is no state
// directory or id is not a sim session id.
func (a *agent) statePath(id string) string {
	if a.opts.StateDir == "" || !validSessionID(id) {
		return ""
	}
	return filepath.Join(a.opts.StateDir, id+".json")
}

// saveSession writes the session's file atomically. The caller holds s.mu,
// so the files of one session are written in order.
func (a *agent) saveSession(id string, s *session) error {
	path := a.statePath(id)
	if path == "" {
		return nil
	}
	st := stateFile{Agent: Name + " (simulated — no AI model)", Simulated: true, SessionID: id, Cwd: s.cwd,
		History: make([]stateExchange, 0, len(s.history))}
	for _, ex := range s.history {
		st.History = append(st.History, stateExchange{ID: ex.id, User: ex.user, Agent: ex.agent})
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(a.opts.StateDir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(a.opts.StateDir, "."+id+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// loadSession reads session id from the state directory: nil, nil when
// there is none (no directory, a foreign id, or no file).
func (a *agent) loadSession(id string) (*session, error) {
	path := a.statePath(id)
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st stateFile
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("sim session file %s: %w", path, err)
	}
	if st.SessionID != id {
		return nil, fmt.Errorf("sim session file %s names session %q", path, st.SessionID)
	}
	s := &session{cwd: st.Cwd, steer: make(chan struct{}, 1)}
	for _, ex := range st.History {
		s.history = append(s.history, exchange{id: ex.ID, user: ex.User, agent: ex.Agent})
	}
	return s, nil
}
