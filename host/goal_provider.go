package host

import (
	"context"
	"errors"
	"strings"
)

// GoalReport is what an agent reports about its goal during a turn (the
// sim agent sends it as the ACP extension notification _ensemble/goal):
// Status "achieved", "failed" or "continue" is its verdict on the goal the
// turn works for; "set" creates or changes the goal itself (Objective
// required), which the Host adopts (turnSink.adoptGoal).
type GoalReport struct {
	Status    string `json:"status"`
	Objective string `json:"objective,omitempty"`
	Criteria  string `json:"criteria,omitempty"`
	MaxTurns  int    `json:"maxTurns,omitempty"`
	Summary   string `json:"summary,omitempty"`
}

// GoalReporter is part of TurnSink. A runtime that carries goal
// notifications calls it; one that does not simply never calls it (the
// text convention remains).
type GoalReporter interface {
	ReportGoal(ctx context.Context, r GoalReport) error
}

// ReportGoal makes an agent's goal report for this sink's Turn canonical
// when, and only when, it was made against the current goal revision:
//   - a verdict counts only from a goal turn carrying the current
//     provenance (a fenced generation's late verdict is dropped);
//   - a provider-set goal is adopted (adoptGoal) only if no goal
//     mutation committed since the reporting turn was admitted, compared
//     inside the session-locked transaction, so a newer user mutation
//     always wins.
//
// A dropped report is not an error for the Turn. Like every sink write it
// is fenced: a replica that lost the session records nothing.
func (k *turnSink) ReportGoal(ctx context.Context, r GoalReport) error {
	r.Status = strings.ToLower(strings.TrimSpace(r.Status))
	switch r.Status {
	case "achieved", "failed", "continue":
	case "set":
		return k.adoptGoal(ctx, r)
	default:
		k.h.log.Info("goal: ignoring an agent goal report with an unknown status", "turn", k.ref.TurnID, "status", r.Status)
		return nil
	}
	woke := false
	err := k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		// A verdict may trail its Turn's terminal: bound, settled or not.
		t, _, err := k.load(ctx, tx, fenceBound)
		if err != nil {
			return err
		}
		cur, err := loadGoal(ctx, tx, t.WorkspaceID, t.SessionID)
		if err != nil {
			return err
		}
		if !currentProvenance(cur.Goal, t) || cur.Goal.Status != GoalActive {
			return nil // fenced or stale: never canonical
		}
		now := k.h.nowUTC()
		cur.Observed = &GoalObservation{Status: r.Status, Objective: cur.Goal.Objective,
			Summary: clip(r.Summary, maxGoalText), TurnID: t.ID, Revision: t.Goal.Revision, At: now}
		cur.Seq, cur.UpdatedAt = cur.Seq+1, now
		woke = true
		return putGoal(ctx, tx, emit, cur)
	})
	if woke {
		k.h.wakeGoals()
	}
	return err
}

// adoptGoal records a goal the agent created or changed during its
// accepted, unsettled Turn as a completed, applied goal operation with a
// new durable revision and converged desired/observed state. It never
// dispatches anything. The replay identity is the Turn plus the goal's
// fingerprint, so a repeated report is adopted once. It is refused
// (dropped, logged) when a goal mutation committed after the Turn was
// admitted: the revision observed before dispatch is compared inside the
// transaction.
func (k *turnSink) adoptGoal(ctx context.Context, r GoalReport) error {
	h, ref := k.h, k.ref
	spec, err := normalizeGoalSpec(GoalSpec{Objective: r.Objective, Criteria: r.Criteria, MaxTurns: r.MaxTurns})
	if err != nil {
		h.log.Info("goal: ignoring an invalid provider goal", "turn", ref.TurnID, "err", err)
		return nil
	}
	digest := goalDigest(ref.SessionID, GoalActionAdopt, spec)
	csid := "ensemble:adopt:" + ref.TurnID + ":" + digest[:16]
	adopted := false
	err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		t, s, err := k.load(ctx, tx, fenceAccepted)
		if err != nil {
			return err
		}
		if _, err := tx.GoalOperation(ctx, ref.WorkspaceID, csid); err == nil {
			return nil // adopted before: replay
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		cur, err := loadGoal(ctx, tx, ref.WorkspaceID, ref.SessionID)
		if err != nil {
			return err
		}
		// The revision this turn was dispatched against: its own
		// provenance for a goal turn; for any other turn, the revision
		// current at its admission (no mutation after its seq).
		if t.Goal != nil {
			if t.Goal.Revision != cur.Revision {
				h.log.Info("goal: provider goal from a superseded revision dropped", "turn", t.ID)
				return nil
			}
			// A held identity (its session being deleted) keeps its
			// revision, so the revision check alone would not catch it.
			if fenced, err := tx.GoalFenced(ctx, ref.WorkspaceID, ref.SessionID, t.Goal.OperationID, t.Goal.Revision); err != nil || fenced {
				return err
			}
		} else if t.Seq <= cur.RevisedAtTurn {
			h.log.Info("goal: provider goal older than a user mutation dropped", "turn", t.ID)
			return nil
		}
		now := h.nowUTC()
		agent := h.runtime.Describe()
		op := GoalOperation{WorkspaceID: ref.WorkspaceID, ClientSubmitID: csid, ID: h.newID("gop"),
			SessionID: ref.SessionID, Action: GoalActionAdopt, Digest: digest, Spec: spec,
			State: GoalOpApplied, By: "agent", ByName: agent.Name, CreatedAt: now, UpdatedAt: now}
		next, _, _, err := applyGoalAction(cur, op, false, now)
		if err != nil {
			return err
		}
		// No fence: the reporting turn is the provider's own work; its
		// verdict cannot advance the new revision (provenance differs).
		op.Revision, next.RevisedAtTurn = next.Revision, s.TurnCount
		next.Observed = &GoalObservation{Status: "set", Objective: spec.Objective, Summary: clip(r.Summary, maxGoalText),
			TurnID: t.ID, Revision: next.Revision, At: now}
		if err := tx.InsertGoalOperation(ctx, op); err != nil {
			return err
		}
		adopted = true
		return putGoal(ctx, tx, emit, next)
	})
	if adopted {
		h.wakeGoals()
	}
	return err
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return excerptGoal(s, n/4)
}
