package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/coder/acp-go-sdk"
)

// Scenario is a scripted answer: the steps run in order for every prompt
// that has no /sim line, in place of the default reply.
//
// The file is a JSON list of steps, each an object with one field:
//
//	[
//	  {"thought": "Planning the change"},
//	  {"text": "Let me look at the code."},
//	  {"tool": {"title": "Read main.go", "kind": "read", "input": {"path": "main.go"}, "output": "package main"}},
//	  {"permission": {"title": "Edit main.go"}},
//	  {"sleep": "500ms"},
//	  {"text": "Done."},
//	  {"fail": "simulated failure"},
//	  {"crash": true}
//	]
type Scenario []Step

// Step is one action of an answer. Exactly one field is set.
type Step struct {
	// Text streams as agent message chunks.
	Text string `json:"text,omitempty"`
	// Thought streams as agent thought chunks.
	Thought string `json:"thought,omitempty"`
	// Tool reports a tool call: pending → in_progress → completed.
	Tool *ToolStep `json:"tool,omitempty"`
	// Permission asks the client for permission and says what it answered.
	Permission *PermissionStep `json:"permission,omitempty"`
	// Question asks the client to pick one of several answers.
	Question *QuestionStep `json:"question,omitempty"`
	// Plan proposes a plan and asks whether to go ahead.
	Plan *PlanStep `json:"plan,omitempty"`
	// Subagent runs nested steps as a sub-agent in its own provider session.
	Subagent *SubagentStep `json:"subagent,omitempty"`
	// Sleep pauses (Go duration syntax, e.g. "250ms").
	Sleep Duration `json:"sleep,omitempty"`
	// Fail ends the prompt with a JSON-RPC error carrying this message.
	Fail string `json:"fail,omitempty"`
	// Crash drops the connection abruptly (stdio: the process exits 3).
	Crash bool `json:"crash,omitempty"`
	// Hang waits until the prompt is cancelled.
	Hang bool `json:"hang,omitempty"`
	// Checklist reports an ACP plan and completes its entries one by one.
	Checklist []string `json:"checklist,omitempty"`
	// Goal sends Ensemble's _ensemble/goal notification (goal.go).
	Goal *GoalStep `json:"goal,omitempty"`
}

// DiffStep is a file edit shown as ACP diff content.
type DiffStep struct {
	Path string  `json:"path"`
	Old  *string `json:"old,omitempty"`
	New  string  `json:"new"`
}

func (d *DiffStep) content() []acp.ToolCallContent {
	if d == nil {
		return nil
	}
	if d.Old == nil {
		return []acp.ToolCallContent{acp.ToolDiffContent(d.Path, d.New)}
	}
	return []acp.ToolCallContent{acp.ToolDiffContent(d.Path, d.New, *d.Old)}
}

// ToolStep is a simulated tool call.
type ToolStep struct {
	Title  string `json:"title"`
	Kind   string `json:"kind,omitempty"` // ACP tool kind: read, edit, execute …
	Input  any    `json:"input,omitempty"`
	Output string `json:"output,omitempty"`
	// Diff makes the call an edit whose content is this diff.
	Diff *DiffStep `json:"diff,omitempty"`
}

// PermissionStep is a simulated permission request for an edit.
type PermissionStep struct {
	Title string `json:"title"`
	// Diff is the edit to approve, shown on the request.
	Diff *DiffStep `json:"diff,omitempty"`
}

// QuestionStep asks the client to choose one of Answers (sent as a
// permission request marked _meta.ensemble.kind = "question").
type QuestionStep struct {
	Text    string   `json:"text"`
	Answers []string `json:"answers"`
}

// PlanStep proposes a plan (a switch_mode permission request marked
// _meta.ensemble.kind = "plan") and says whether it was approved.
type PlanStep struct {
	Text string `json:"text"`
}

// SubagentStep runs Steps as a sub-agent: a tool call announces its own
// provider session (_meta.ensemble.subagent) and its output and requests
// go to that session; the tool call completes when the steps are done.
type SubagentStep struct {
	Title string `json:"title"`
	Steps []Step `json:"steps"`
}

// Duration is a time.Duration written as a Go duration string in JSON.
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("sleep must be a duration string like \"250ms\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("sleep %q: not a non-negative duration", s)
	}
	*d = Duration(v)
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// ParseScenario decodes and checks a scenario.
func ParseScenario(data []byte) (Scenario, error) {
	var sc Scenario
	if err := json.Unmarshal(data, &sc); err != nil {
		return nil, fmt.Errorf("sim scenario: %w", err)
	}
	if len(sc) == 0 {
		return nil, fmt.Errorf("sim scenario: no steps")
	}
	for i, s := range sc {
		if n := s.fields(); n != 1 {
			return nil, fmt.Errorf("sim scenario: step %d must set exactly one field, has %d", i, n)
		}
		if s.Tool != nil && s.Tool.Title == "" {
			return nil, fmt.Errorf("sim scenario: step %d: tool needs a title", i)
		}
		if s.Question != nil && (s.Question.Text == "" || len(s.Question.Answers) == 0) {
			return nil, fmt.Errorf("sim scenario: step %d: a question needs text and answers", i)
		}
		if s.Subagent != nil && len(s.Subagent.Steps) == 0 {
			return nil, fmt.Errorf("sim scenario: step %d: a sub-agent needs steps", i)
		}
	}
	return sc, nil
}

// LoadScenario reads a scenario file.
func LoadScenario(path string) (Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sim scenario: %w", err)
	}
	return ParseScenario(data)
}

func (s Step) fields() int {
	n := 0
	for _, set := range []bool{s.Text != "", s.Thought != "", s.Tool != nil, s.Permission != nil, s.Question != nil,
		s.Plan != nil, s.Subagent != nil, s.Sleep > 0, s.Fail != "", s.Crash, s.Hang} {
		if set {
			n++
		}
	}
	return n
}
