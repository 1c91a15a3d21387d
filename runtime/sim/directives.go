package sim

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// directives is what a "/sim …" first line asks for.
type directives struct {
	words      int           // long answer of this many words (0: the default reply)
	rate       time.Duration // delay between chunks (-1: no delay)
	tool       bool
	think      bool
	permission bool
	question   bool
	plan       bool
	subagent   bool
	fail       bool
	errorAfter int // fail after this many streamed words (0: never)
	hang       bool
	crash      bool
	stamp      bool // append the emission time (@unix-nanos) to every answer chunk (load tests)
	markdown   bool // answer in rich markdown (headings, lists, table, code)
	diff       bool // an edit tool call with a diff, and an approval showing it
	checklist  bool // an ACP plan whose entries progress live
	recall     bool // answer with the prompts this session remembers (fork.go)
	goal       goalDirectives
	unknown    []string
}

// parseDirectives splits prompt text into directives (from a first line
// starting with "/sim") and the rest of the text. ok is false when there is
// no /sim line.
func parseDirectives(text string) (d directives, rest string, ok bool) {
	first, rest, _ := strings.Cut(strings.TrimLeft(text, " \t\r\n"), "\n")
	first = strings.TrimSpace(first)
	if first != "/sim" && !strings.HasPrefix(first, "/sim ") {
		return directives{}, text, false
	}
	for _, tok := range strings.Fields(strings.TrimPrefix(first, "/sim")) {
		name, val, hasVal := strings.Cut(tok, "=")
		switch {
		case name == "words" && hasVal:
			if n, err := strconv.Atoi(val); err == nil && n > 0 && n <= 100000 {
				d.words = n
				continue
			}
		case name == "rate" && hasVal:
			if r, err := time.ParseDuration(val); err == nil && r >= 0 && r <= time.Minute {
				d.rate = r
				if r == 0 {
					d.rate = -1
				}
				continue
			}
		case name == "error-after" && hasVal:
			if n, err := strconv.Atoi(val); err == nil && n > 0 {
				d.errorAfter = n
				continue
			}
		case tok == "tool":
			d.tool = true
			continue
		case tok == "think":
			d.think = true
			continue
		case tok == "permission":
			d.permission = true
			continue
		case tok == "question":
			d.question = true
			continue
		case tok == "plan":
			d.plan = true
			continue
		case tok == "subagent":
			d.subagent = true
			continue
		case tok == "deaf":
			continue // handled by the transport (see deafReader)
		case tok == "fail":
			d.fail = true
			continue
		case tok == "hang":
			d.hang = true
			continue
		case tok == "crash":
			d.crash = true
			continue
		case tok == "instant":
			d.rate = -1
			continue
		case tok == "stamp":
			d.stamp = true
			continue
		case tok == "markdown":
			d.markdown = true
			continue
		case tok == "diff":
			d.diff = true
			continue
		case tok == "checklist":
			d.checklist = true
			continue
		case tok == "recall":
			d.recall = true
			continue
		case d.goal.parse(name, val, hasVal):
			continue
		}
		d.unknown = append(d.unknown, tok)
	}
	return d, strings.TrimSpace(rest), true
}

// script turns directives into the steps of one answer. The answer text is
// split around a tool call or permission request so they sit between text.
func (d directives) script(prompt string, firstInSession bool) []Step {
	if d.fail {
		return []Step{{Fail: "simulated failure (/sim fail)"}}
	}
	var steps []Step
	if d.think {
		steps = append(steps, Step{Thought: "The user asked: " + excerpt(prompt, 12) + " Let me think about that step by step — simulated reasoning, no model involved."})
	}
	var answer string
	if d.words > 0 {
		answer = longAnswer(d.words)
	} else {
		answer = defaultReply(prompt, firstInSession)
	}
	if d.markdown {
		answer = markdownSample
	}
	if len(d.unknown) > 0 {
		answer += fmt.Sprintf(" (Ignored unknown /sim directives: %s.)", strings.Join(d.unknown, " "))
	}
	if d.tool {
		head, tail := splitAnswer(answer)
		steps = append(steps, Step{Text: head}, Step{Tool: &ToolStep{
			Title:  "Reading README.md (simulated)",
			Kind:   "read",
			Input:  map[string]any{"path": "README.md"},
			Output: "# Simulated project\n\nThis file content is made up by the Ensemble sim agent.",
		}})
		if tail != "" {
			steps = append(steps, Step{Text: tail})
		}
	} else {
		steps = append(steps, Step{Text: answer})
	}
	if d.checklist {
		steps = append(steps, Step{Checklist: []string{"Read config.json", "Switch the database host", "Run the tests"}})
	}
	if d.diff {
		steps = append(steps, Step{Tool: &ToolStep{Title: "Edit main.go (simulated)", Kind: "edit",
			Input: map[string]any{"path": "main.go"}, Diff: &sampleDiff}})
	}
	if d.permission || d.diff {
		ps := &PermissionStep{Title: "Edit config.json (simulated)"}
		if d.diff {
			ps.Diff = &sampleConfigDiff
		}
		steps = append(steps, Step{Permission: ps})
	}
	if d.question {
		steps = append(steps, Step{Question: &QuestionStep{
			Text:    "Which database should the simulated change use?",
			Answers: []string{"PostgreSQL", "SQLite"},
		}})
	}
	if d.plan {
		steps = append(steps, Step{Plan: &PlanStep{Text: "1. Read config.json\n2. Switch the database host\n3. Run the tests (all simulated)"}})
	}
	if d.subagent {
		steps = append(steps, Step{Subagent: &SubagentStep{Title: "Review the change (simulated sub-agent)",
			Steps: []Step{
				{Text: "Sub-agent here: reviewing the change (simulated)."},
				{Permission: &PermissionStep{Title: "Sub-agent: edit review.md (simulated)"}},
			}}})
	}
	steps = append(steps, d.goal.steps(prompt)...)
	switch {
	case d.hang:
		steps = append(steps, Step{Text: " Now hanging until cancelled (simulated)."}, Step{Hang: true})
	case d.crash:
		steps = append(steps, Step{Text: " Now crashing (simulated)."}, Step{Crash: true})
	}
	return steps
}

// defaultReply is a friendly, deterministic answer that comments on the prompt.
func defaultReply(prompt string, firstInSession bool) string {
	comments := []string{
		"That sounds like a good place to start.",
		"I would break that into smaller steps first.",
		"Interesting — a real agent would now read some code.",
		"Let me pretend to think hard about that.",
		"Noted. In a real session this is where the work would happen.",
	}
	h := fnv.New32a()
	h.Write([]byte(prompt))
	var b strings.Builder
	if firstInSession {
		b.WriteString("Hello! I'm the Ensemble sim agent — simulated, no AI model involved. ")
	}
	n := len(strings.Fields(prompt))
	switch n {
	case 0:
		b.WriteString("You sent an empty prompt. ")
	case 1:
		fmt.Fprintf(&b, "You wrote one word: %s. ", excerpt(prompt, 12))
	default:
		fmt.Fprintf(&b, "You wrote %d words: %s. ", n, excerpt(prompt, 12))
	}
	b.WriteString(comments[h.Sum32()%uint32(len(comments))])
	return b.String()
}

// longAnswer is n deterministic words in sentences.
func longAnswer(n int) string {
	vocab := strings.Fields("the simulated agent streams words so that you can watch a long answer arrive " +
		"chunk by chunk while collaborators follow along live in their browsers and nothing here " +
		"comes from a model every word is generated by a fixed pattern for demos tests and load")
	var b strings.Builder
	for i := range n {
		w := vocab[i%len(vocab)]
		if i%12 == 0 {
			w = strings.ToUpper(w[:1]) + w[1:]
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
		if i%12 == 11 || i == n-1 {
			b.WriteByte('.')
		}
	}
	return b.String()
}

// excerpt quotes the first n words of s.
func excerpt(s string, n int) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return "“”"
	}
	if len(f) > n {
		return "“" + strings.Join(f[:n], " ") + " …”"
	}
	return "“" + strings.Join(f, " ") + "”"
}

// splitAnswer cuts text in two near the middle, at a sentence end when
// there is one, else at a word boundary.
func splitAnswer(s string) (string, string) {
	f := strings.Fields(s)
	if len(f) < 2 {
		return s, ""
	}
	best := -1
	for i := 1; i < len(f); i++ {
		if strings.ContainsAny(f[i-1][len(f[i-1])-1:], ".!?") && (best < 0 || abs(i-len(f)/2) < abs(best-len(f)/2)) {
			best = i
		}
	}
	if best < 0 {
		best = len(f) / 2
	}
	return strings.Join(f[:best], " "), strings.Join(f[best:], " ")
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// markdownSample exercises what a GUI must render: headings, emphasis,
// lists, a table, a quote, a link and a fenced code block.
const markdownSample = "## Simulated summary\n\n" +
	"Here is **what changed** and *why* (all simulated):\n\n" +
	"- switched the database to `postgres`\n- kept the cache warm\n\n" +
	"| step | status |\n| --- | --- |\n| read | done |\n| edit | done |\n\n" +
	"> Nothing here comes from a model.\n\n" +
	"See [the ACP spec](https://agentclientprotocol.com) for details.\n\n" +
	"```go\nfunc main() {\n\tfmt.Println(\"hello, ensemble\")\n}\n```\n"

var (
	sampleOld  = "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n"
	sampleDiff = DiffStep{Path: "main.go", Old: &sampleOld,
		New: "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hello, ensemble\")\n}\n"}
	sampleConfigOld  = "{\n  \"db\": \"sqlite\",\n  \"debug\": false\n}\n"
	sampleConfigDiff = DiffStep{Path: "config.json", Old: &sampleConfigOld,
		New: "{\n  \"db\": \"postgres\",\n  \"debug\": false\n}\n"}
)
