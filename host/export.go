package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"
)

// Replay capture and restore (seed: CaptureHistoricalSessionGraph /
// RestoreHistoricalSessionGraph). A session graph is a portable,
// versioned, deterministic JSON document of one settled execution tree:
// sessions (root first, then descendants by creation), their turns,
// messages (text included), interactions, settings, pin, and the agent's
// opaque resume checkpoint. It never names a workspace or the user who
// owns the sessions: restore binds every session to the target workspace
// and user given outside the graph. Encoding the same canonical state
// twice gives the same bytes (EncodeGraph), so export → import → export is
// byte-identical.

// GraphFormat and GraphVersion identify the document.
const (
	GraphFormat  = "ensemble.session-graph"
	GraphVersion = 1
)

// Stable reasons for capture/restore refusals.
const (
	ReasonNotSettled     = "session_not_settled"
	ReasonGraphInvalid   = "graph_invalid"
	ReasonImportConflict = "import_conflict"
)

// SessionGraph is the portable document.
type SessionGraph struct {
	Format   string         `json:"format"`
	Version  int            `json:"version"`
	Sessions []GraphSession `json:"sessions"`
}

// GraphSession is one session with its canonical history. Turns,
// messages and interactions carry an empty workspace.
type GraphSession struct {
	ID             string            `json:"id"`
	ParentID       string            `json:"parentId,omitempty"`
	RootID         string            `json:"rootId"`
	Title          string            `json:"title"`
	TitleExplicit  bool              `json:"titleExplicit"`
	Agent          string            `json:"agent"`
	Simulated      bool              `json:"simulated"`
	Settings       map[string]string `json:"settings,omitempty"`
	Pinned         bool              `json:"pinned"`
	ContextLost    bool              `json:"contextLost,omitempty"`
	MessageVersion int64             `json:"messageVersion"`
	TurnCount      int64             `json:"turnCount"`
	CreatedAt      time.Time         `json:"createdAt"`
	UpdatedAt      time.Time         `json:"updatedAt"`
	// ProviderResumeCheckpoint is the narrow, opaque identity the agent
	// needs to resume the conversation (session/load); full provider
	// runtime context is never exported.
	ProviderResumeCheckpoint *ResumeCheckpoint `json:"providerResumeCheckpoint,omitempty"`
	// ForkedFrom is the session's fork lineage, when it is a fork.
	ForkedFrom *GraphLineage `json:"forkedFrom,omitempty"`
	// Goal is the session's goal record (absent when it never had one).
	Goal         *GraphGoal    `json:"goal,omitempty"`
	Turns        []Turn        `json:"turns"`
	Messages     []Message     `json:"messages"`
	Interactions []Interaction `json:"interactions"`
}

// GraphLineage is a fork's immutable lineage (ForkOp, committed).
type GraphLineage struct {
	ClientSubmitID  string    `json:"clientSubmitId"`
	SourceSessionID string    `json:"sourceSessionId"`
	SourceTurnID    string    `json:"sourceTurnId"`
	LineageID       string    `json:"lineageId"`
	LineageSeq      int64     `json:"lineageSeq"`
	BaseTitle       string    `json:"baseTitle"`
	CreatedAt       time.Time `json:"createdAt"`
}

// GraphGoal is a session's goal record as the graph carries it: GoalState
// without the workspace and session it belongs to (the graph session
// names it). Everything is canonical and restored exactly, timestamps
// included (StartedAt bounds the goal's wall time). Only the record is
// carried: goal operations and fences are the source installation's work
// log, not history.
type GraphGoal struct {
	Revision      int64            `json:"revision"`
	Seq           int64            `json:"seq"`
	RevisedAtTurn int64            `json:"revisedAtTurn"`
	Goal          *Goal            `json:"goal,omitempty"`
	Observed      *GoalObservation `json:"observed,omitempty"`
	UpdatedAt     time.Time        `json:"updatedAt"`
}

// ReasonImported is the ByOperation of the fence an import writes on an
// active goal's identity: the imported goal reads exactly as exported but
// is held — it never arms a turn until a person resumes it.
const ReasonImported = "ensemble:import"

// ResumeCheckpoint is opaque to the Host.
type ResumeCheckpoint struct {
	ProviderSessionID string `json:"providerSessionId"`
}

// EncodeGraph is the canonical encoding: indented JSON with a final
// newline. Map keys are sorted by encoding/json, slices are in canonical
// order, so equal graphs give equal bytes.
func EncodeGraph(g SessionGraph) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(g); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// DecodeGraph reads a graph strictly (unknown fields are refused).
func DecodeGraph(data []byte) (SessionGraph, error) {
	var g SessionGraph
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&g); err != nil {
		return SessionGraph{}, &Error{Code: CodeInvalidInput, Reason: ReasonGraphInvalid, Err: err, Message: "not a session graph document"}
	}
	return g, nil
}

// CaptureSessionGraph reads the settled execution tree of sessionID's
// root from the store. It starts nothing.
func CaptureSessionGraph(ctx context.Context, st Store, ws, sessionID string) (SessionGraph, error) {
	if err := requireIDs(ws, sessionID); err != nil {
		return SessionGraph{}, err
	}
	s, err := st.GetSession(ctx, ws, sessionID)
	if err != nil {
		return SessionGraph{}, storeErr(err, "session %s", sessionID)
	}
	if !visible(s) {
		return SessionGraph{}, Errorf(CodeNotFound, "session %s not found", sessionID)
	}
	all, err := st.SessionTree(ctx, ws, s.RootID)
	if err != nil {
		return SessionGraph{}, storeErr(err, "session tree %s", s.RootID)
	}
	// The visible sessions only: root first, then (created at, id).
	var tree []Session
	for _, ts := range all {
		if visible(ts.Session) {
			tree = append(tree, ts.Session)
		}
	}
	slices.SortStableFunc(tree, func(a, b Session) int {
		switch {
		case a.ID == s.RootID && b.ID != s.RootID:
			return -1
		case b.ID == s.RootID && a.ID != s.RootID:
			return 1
		}
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	g := SessionGraph{Format: GraphFormat, Version: GraphVersion, Sessions: []GraphSession{}}
	for _, ss := range tree {
		gs, err := captureSession(ctx, st, ss)
		if err != nil {
			return SessionGraph{}, err
		}
		g.Sessions = append(g.Sessions, gs)
	}
	if len(g.Sessions) == 0 || g.Sessions[0].ID != s.RootID {
		return SessionGraph{}, Errorf(CodeNotFound, "session %s not found", s.RootID)
	}
	return g, nil
}

func captureSession(ctx context.Context, st Store, s Session) (GraphSession, error) {
	notSettled := &Error{Code: CodeOperationConflict, Reason: ReasonNotSettled,
		Message: "only settled sessions are exported; wait for running turns to end"}
	if s.ActiveTurnID != "" {
		return GraphSession{}, notSettled
	}
	tr, err := readTranscript(ctx, st, s.WorkspaceID, s.ID, 0)
	if err != nil {
		return GraphSession{}, storeErr(err, "session %s", s.ID)
	}
	gs := GraphSession{ID: s.ID, ParentID: s.ParentID, RootID: s.RootID, Title: s.Title,
		TitleExplicit: s.TitleExplicit, Agent: s.Agent, Simulated: s.Simulated, Settings: s.Settings,
		Pinned: s.Pinned, ContextLost: s.ContextLost, MessageVersion: s.MessageVersion, TurnCount: s.TurnCount,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
		Turns: []Turn{}, Messages: []Message{}, Interactions: []Interaction{}}
	if s.ProviderSessionID != "" {
		gs.ProviderResumeCheckpoint = &ResumeCheckpoint{ProviderSessionID: s.ProviderSessionID}
	}
	if gs.ForkedFrom, err = readLineage(ctx, st, s); err != nil {
		return GraphSession{}, storeErr(err, "session %s lineage", s.ID)
	}
	if gs.Goal, err = captureGoal(ctx, st, s); err != nil {
		return GraphSession{}, err
	}
	for _, t := range tr.Turns {
		if !t.Settled() {
			return GraphSession{}, notSettled
		}
		t.WorkspaceID, t.AppliedSeq = "", 0
		gs.Turns = append(gs.Turns, t)
	}
	for _, m := range tr.Messages {
		if m.Streaming {
			return GraphSession{}, notSettled
		}
		m.WorkspaceID = ""
		gs.Messages = append(gs.Messages, m)
	}
	for _, i := range tr.Interactions {
		i.WorkspaceID = ""
		gs.Interactions = append(gs.Interactions, i)
	}
	return gs, nil
}

// captureGoal reads the session's goal record (nil: it never had one).
func captureGoal(ctx context.Context, st Store, s Session) (*GraphGoal, error) {
	g, err := st.GetGoal(ctx, s.WorkspaceID, s.ID)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, storeErr(err, "goal of session %s", s.ID)
	}
	return &GraphGoal{Revision: g.Revision, Seq: g.Seq, RevisedAtTurn: g.RevisedAtTurn,
		Goal: g.Goal, Observed: g.Observed, UpdatedAt: g.UpdatedAt}, nil
}

// readLineage reads a session's committed fork lineage (nil when it is
// not a fork, or the store keeps no forks).
func readLineage(ctx context.Context, st Store, s Session) (*GraphLineage, error) {
	var out *GraphLineage
	err := st.Update(ctx, func(tx Tx) error {
		op, err := tx.SessionLineage(ctx, s.WorkspaceID, s.ID)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		out = &GraphLineage{ClientSubmitID: op.ClientSubmitID, SourceSessionID: op.SourceSessionID,
			SourceTurnID: op.SourceTurnID, LineageID: op.LineageID, LineageSeq: op.LineageSeq,
			BaseTitle: op.BaseTitle, CreatedAt: op.CreatedAt}
		return nil
	})
	return out, err
}

// RestoreGraphInput restores a graph into WorkspaceID, every session
// owned by UserID. WorkspaceRoot, when set, bounds restored working
// directories as Config.WorkspaceRoot does.
type RestoreGraphInput struct {
	WorkspaceID   string
	UserID        string
	Graph         SessionGraph
	WorkspaceRoot string
}

// RestoreGraphResult names the restored sessions; Created is false when
// the identical graph was already there (an idempotent replay).
type RestoreGraphResult struct {
	Sessions []string
	Created  bool
}

// RestoreSessionGraph writes a graph in one transaction without starting
// or resuming any agent. Restoring identical content for the same user
// again changes nothing; any other overlap is an import_conflict.
func RestoreSessionGraph(ctx context.Context, st Store, in RestoreGraphInput) (RestoreGraphResult, error) {
	if err := requireIDs(in.WorkspaceID, in.UserID); err != nil {
		return RestoreGraphResult{}, err
	}
	if err := validateGraph(in.Graph, in.WorkspaceRoot); err != nil {
		return RestoreGraphResult{}, err
	}
	res := RestoreGraphResult{}
	for _, s := range in.Graph.Sessions {
		res.Sessions = append(res.Sessions, s.ID)
	}
	root := in.Graph.Sessions[0].ID
	for attempt := 0; attempt < 2; attempt++ {
		if _, err := st.GetSession(ctx, in.WorkspaceID, root); err == nil {
			return res, sameContent(ctx, st, in)
		} else if !errors.Is(err, ErrNotFound) {
			return RestoreGraphResult{}, storeErr(err, "session %s", root)
		}
		err := st.Update(ctx, func(tx Tx) error { return writeGraph(ctx, tx, in) })
		if errors.Is(err, ErrDuplicate) {
			continue // a concurrent identical import, or an id taken: compare
		}
		if err != nil {
			return RestoreGraphResult{}, storeErr(err, "import")
		}
		res.Created = true
		return res, nil
	}
	return RestoreGraphResult{}, importConflict()
}

func importConflict() *Error {
	return &Error{Code: CodeOperationConflict, Reason: ReasonImportConflict,
		Message: "the workspace already holds different content under these ids"}
}

// sameContent accepts a replay only if the stored tree is byte-for-byte
// the graph and every session belongs to the same user.
func sameContent(ctx context.Context, st Store, in RestoreGraphInput) error {
	root := in.Graph.Sessions[0].ID
	have, err := CaptureSessionGraph(ctx, st, in.WorkspaceID, root)
	if err != nil {
		if CodeOf(err) == CodeNotFound || CodeOf(err) == CodeOperationConflict {
			return importConflict()
		}
		return err
	}
	a, err1 := EncodeGraph(have)
	b, err2 := EncodeGraph(in.Graph)
	if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
		return importConflict()
	}
	for _, s := range in.Graph.Sessions {
		cur, err := st.GetSession(ctx, in.WorkspaceID, s.ID)
		if err != nil || cur.CreatedBy != in.UserID {
			return importConflict()
		}
	}
	return nil
}

// validateGraph checks the document's shape: one tree, settled, every
// record inside its own session, ids valid, working directories bounded.
func validateGraph(g SessionGraph, root string) error {
	bad := func(msg string) error {
		return &Error{Code: CodeInvalidInput, Reason: ReasonGraphInvalid, Message: msg}
	}
	if g.Format != GraphFormat || g.Version != GraphVersion {
		return bad("unknown graph format or version")
	}
	if len(g.Sessions) == 0 {
		return bad("a graph holds at least one session")
	}
	rootID := g.Sessions[0].ID
	ids := map[string]bool{}
	for i, s := range g.Sessions {
		if err := requireIDs(s.ID, s.RootID); err != nil {
			return bad("session ids must be valid")
		}
		if ids[s.ID] {
			return bad("a session appears twice")
		}
		ids[s.ID] = true
		if s.RootID != rootID || (i == 0) != (s.ParentID == "") || (i > 0 && !ids[s.ParentID]) {
			return bad("sessions must form one tree, root first, parents before children")
		}
		if len(s.Settings) > maxSettings {
			return bad("too many settings")
		}
		if l := s.ForkedFrom; l != nil && (i != 0 || requireIDs(l.ClientSubmitID, l.SourceSessionID, l.LineageID) != nil || l.LineageSeq < 2) {
			return bad("only the root can be a fork, with a complete lineage")
		}
		if cwd, ok := s.Settings[SettingCwd]; ok && root != "" {
			got, err := resolveUnderRoot(root, cwd)
			if err != nil {
				return err
			}
			if got != cwd {
				return &Error{Code: CodeInvalidInput, Reason: ReasonCwdOutsideRoot, Message: "a working directory is not a resolved path under the workspace root"}
			}
		}
		turns := map[string]bool{}
		for _, t := range s.Turns {
			if t.SessionID != s.ID || t.WorkspaceID != "" || requireIDs(t.ID) != nil || !t.Settled() || !t.Outcome.Valid() {
				return bad("every turn must be a settled turn of its session")
			}
			turns[t.ID] = true
		}
		for _, m := range s.Messages {
			if m.SessionID != s.ID || m.WorkspaceID != "" || requireIDs(m.ID) != nil || m.Streaming || (m.TurnID != "" && !turns[m.TurnID]) || m.Version > s.MessageVersion {
				return bad("every message must be a closed message of its session's turns")
			}
		}
		for _, it := range s.Interactions {
			if it.SessionID != s.ID || it.WorkspaceID != "" || it.RootSessionID != rootID || !turns[it.TurnID] || it.State == InteractionPending {
				return bad("every interaction must be a resolved interaction of its session's turns")
			}
		}
		if gg := s.Goal; gg != nil {
			g := gg.Goal
			switch {
			case gg.Revision < 0 || gg.Seq < 0 || gg.RevisedAtTurn < 0 || gg.RevisedAtTurn > s.TurnCount:
				return bad("a goal's revision, seq and revisedAtTurn must be within the session")
			case g != nil && (!g.Status.Valid() || g.Revision < 1 || g.Revision > gg.Revision || g.Generation > g.Revision || g.OperationID == ""):
				return bad("a goal must have a known status and a revision no later than its record's")
			case g != nil && g.ActiveTurnID != "" && !turns[g.ActiveTurnID]:
				return bad("a goal's active turn must be a settled turn of its session")
			}
		}
	}
	return nil
}

// writeGraph inserts the whole graph bound to the target workspace and
// user, and records one session change so watchers see it.
func writeGraph(ctx context.Context, tx Tx, in RestoreGraphInput) error {
	for _, gs := range in.Graph.Sessions {
		s := Session{WorkspaceID: in.WorkspaceID, ID: gs.ID, ParentID: gs.ParentID, RootID: gs.RootID,
			Title: gs.Title, TitleExplicit: gs.TitleExplicit, Agent: gs.Agent, Simulated: gs.Simulated,
			Settings: gs.Settings, Pinned: gs.Pinned, ContextLost: gs.ContextLost,
			MessageVersion: gs.MessageVersion, TurnCount: gs.TurnCount, CreatedBy: in.UserID,
			CreatedAt: gs.CreatedAt, UpdatedAt: gs.UpdatedAt}
		if gs.ProviderResumeCheckpoint != nil {
			s.ProviderSessionID = gs.ProviderResumeCheckpoint.ProviderSessionID
		}
		if err := tx.InsertSession(ctx, s); err != nil {
			return err
		}
		if l := gs.ForkedFrom; l != nil {
			if err := tx.InsertForkOp(ctx, ForkOp{WorkspaceID: in.WorkspaceID, ClientSubmitID: l.ClientSubmitID,
				SourceSessionID: l.SourceSessionID, SourceTurnID: l.SourceTurnID, TargetSessionID: s.ID,
				LineageID: l.LineageID, LineageSeq: l.LineageSeq, BaseTitle: l.BaseTitle, State: ForkCommitted,
				ProviderSessionID: s.ProviderSessionID, CreatedBy: in.UserID, CreatedAt: l.CreatedAt, UpdatedAt: l.CreatedAt}); err != nil {
				return err
			}
		}
		for _, t := range gs.Turns {
			t.WorkspaceID = in.WorkspaceID
			if err := tx.InsertTurn(ctx, t); err != nil {
				return err
			}
		}
		for _, m := range gs.Messages {
			m.WorkspaceID = in.WorkspaceID
			if err := tx.PutMessage(ctx, m); err != nil {
				return err
			}
		}
		for _, i := range gs.Interactions {
			i.WorkspaceID = in.WorkspaceID
			if err := tx.InsertInteraction(ctx, i); err != nil {
				return err
			}
		}
		if err := restoreGoal(ctx, tx, in, s); err != nil {
			return err
		}
		if _, err := tx.AppendFacts(ctx, Fact{WorkspaceID: in.WorkspaceID, Kind: FactSessionChanged, SessionID: s.ID}); err != nil {
			return err
		}
	}
	return nil
}

// restoreGoal writes an imported session's goal record exactly as the
// graph has it, in the import's transaction, with its goal_state fact. An
// active goal is held (a done fence on its exact identity, as the
// deletion coordinator does): restore never starts an agent, so the goal
// loop does not arm it until a person resumes it, which starts a new
// revision. The graph stays unchanged, so export → import → export is
// byte-identical.
func restoreGoal(ctx context.Context, tx Tx, in RestoreGraphInput, s Session) error {
	var gs *GraphGoal
	for i := range in.Graph.Sessions {
		if in.Graph.Sessions[i].ID == s.ID {
			gs = in.Graph.Sessions[i].Goal
		}
	}
	if gs == nil {
		return nil
	}
	st := GoalState{WorkspaceID: in.WorkspaceID, SessionID: s.ID, Revision: gs.Revision, Seq: gs.Seq,
		RevisedAtTurn: gs.RevisedAtTurn, Goal: gs.Goal, Observed: gs.Observed, UpdatedAt: gs.UpdatedAt}
	if err := tx.PutGoal(ctx, st); err != nil {
		return err
	}
	if g := st.Goal; g != nil && g.Status == GoalActive {
		f := GoalFence{WorkspaceID: in.WorkspaceID, SessionID: s.ID, OperationID: g.OperationID, Revision: g.Revision,
			ByOperation: ReasonImported, State: GoalFenceDone, CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
		if err := tx.InsertGoalFence(ctx, f); err != nil {
			return err
		}
	}
	cp := st
	cp.Held = st.Goal != nil && st.Goal.Status == GoalActive // fenced just above
	_, err := tx.AppendFacts(ctx, Fact{WorkspaceID: in.WorkspaceID, Kind: FactGoalState, SessionID: s.ID, Version: st.Seq, Goal: &cp})
	return err
}

// ExportSession is CaptureSessionGraph for a caller of this Host.
func (h *Host) ExportSession(ctx context.Context, ws, sessionID string) (SessionGraph, error) {
	return CaptureSessionGraph(ctx, h.store, ws, sessionID)
}

// ImportSessionGraph is RestoreSessionGraph bounded by this Host's
// workspace root. Watchers learn of the sessions through the outbox relay.
func (h *Host) ImportSessionGraph(ctx context.Context, ws, userID string, g SessionGraph) (RestoreGraphResult, error) {
	return RestoreSessionGraph(ctx, h.store, RestoreGraphInput{WorkspaceID: ws, UserID: userID, Graph: g, WorkspaceRoot: h.workspaceRoot})
}
