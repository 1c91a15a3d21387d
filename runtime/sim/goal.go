package sim

import (
	"regexp"
	"strconv"
	"strings"
)

// The sim agent owns goals the way a native provider would, through
// Ensemble's ACP extension notification _ensemble/goal (see
// runtime/acp/goal.go), so the Host's goal loop and provider adoption can
// be exercised without a model. Directives:
//
//	goal-after=N       on goal turn N or later, report "achieved" (notification)
//	goal-text-after=N  the same through the text convention only ("GOAL: ACHIEVED")
//	goal-fail          report "failed" (notification)
//	goal-set=a-b-c     set the goal itself to "a b c" (provider-owned goal)
//	goal-hang-from=N   on goal turn N or later, hang (after any report) until cancelled
type goalDirectives struct {
	after     int
	textAfter int
	hangFrom  int
	fail      bool
	set       string
}

func (g *goalDirectives) parse(name, val string, hasVal bool) bool {
	switch {
	case name == "goal-after" && hasVal:
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 {
			return false
		}
		g.after = n
	case name == "goal-text-after" && hasVal:
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 {
			return false
		}
		g.textAfter = n
	case name == "goal-hang-from" && hasVal:
		n, err := strconv.Atoi(val)
		if err != nil || n < 1 {
			return false
		}
		g.hangFrom = n
	case name == "goal-fail" && !hasVal:
		g.fail = true
	case name == "goal-set" && hasVal && val != "":
		g.set = strings.ReplaceAll(val, "-", " ")
	default:
		return false
	}
	return true
}

// goalTurn reads the goal turn number from a Host goal prompt ("[goal turn
// N of M …]"); 0 when the prompt is not a goal turn.
var goalTurnRe = regexp.MustCompile(`\[goal turn (\d+) of `)

func goalTurn(prompt string) int {
	m := goalTurnRe.FindStringSubmatch(prompt)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// GoalStep sends one _ensemble/goal notification for the session.
type GoalStep struct {
	Status    string `json:"status"`
	Objective string `json:"objective,omitempty"`
}

func (g goalDirectives) steps(prompt string) []Step {
	n := goalTurn(prompt)
	var out []Step
	if g.set != "" {
		out = append(out, Step{Text: " Setting my own goal (simulated): " + g.set + "."},
			Step{Goal: &GoalStep{Status: "set", Objective: g.set}})
	}
	switch {
	case n == 0:
	case g.fail:
		out = append(out, Step{Text: " This goal cannot be achieved (simulated)."}, Step{Goal: &GoalStep{Status: "failed"}})
	case g.after > 0 && n >= g.after:
		out = append(out, Step{Text: " The goal is achieved (simulated)."}, Step{Goal: &GoalStep{Status: "achieved"}})
	case g.textAfter > 0 && n >= g.textAfter:
		out = append(out, Step{Text: "\nGOAL: ACHIEVED"})
	case g.after > 0 || g.textAfter > 0:
		out = append(out, Step{Text: " More work remains on the goal (simulated)."}, Step{Goal: &GoalStep{Status: "continue"}})
	}
	if g.hangFrom > 0 && n >= g.hangFrom {
		out = append(out, Step{Text: " Now hanging until cancelled (simulated)."}, Step{Hang: true})
	}
	return out
}

// goal sends the notification; the agent never waits for an answer.
func (r *run) goal(g GoalStep) error {
	return r.a.peer().NotifyExtension(r.ctx, "_ensemble/goal", map[string]any{
		"sessionId": string(r.sid), "status": g.Status, "objective": g.Objective,
	})
}
