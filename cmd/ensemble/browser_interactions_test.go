package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Two tabs signed in as two people watch one session. The agent asks for
// permission: the approval appears in both tabs with the agent's options
// and the tool call; Bob answers in his tab, and both tabs show it
// answered by Bob while the agent continues with his choice.
func TestBrowserApprovalAnsweredByAnotherCollaborator(t *testing.T) {
	b := browser(t)
	dataDir := t.TempDir()
	p := startServer(t, dataDir)
	out, err := exec.Command(ensembleBinary(t), "token", "--data-dir", dataDir, "--addr", p.addr,
		"--sub", "bob", "--name", "Bob", "--role", "member", "--workspace", "default").Output()
	if err != nil {
		t.Fatalf("ensemble token: %v", err)
	}
	bobLink := strings.TrimSpace(string(out))

	local := tab(t, b, p.link)
	bob := tab(t, b, bobLink)

	do(t, local, "create a session",
		chromedp.Click(chromedp.CSS(`#new-session`)),
		chromedp.WaitVisible(chromedp.CSS(`#session-list [data-session-id]`)))
	attr := get(t, local, "read the session id",
		chromedp.AttributeValue(chromedp.CSS(`#session-list [data-session-id]`), "data-session-id"))
	if !attr.Exists || attr.Value == "" {
		t.Fatal("the new session is not in the list")
	}
	sel := `#session-list [data-session-id="` + attr.Value + `"]`
	do(t, bob, "open the same session as Bob",
		chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))

	do(t, local, "ask the agent to do something that needs approval",
		chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "/sim permission"),
		chromedp.Click(chromedp.CSS(`#send`)))

	tabs := []struct {
		name string
		ctx  context.Context
	}{{"the first tab", local}, {"Bob's tab", bob}}
	pending := `#transcript .interaction[data-state="pending"][data-actionable="true"]`
	for _, tb := range tabs {
		do(t, tb.ctx, "the approval appears in "+tb.name, chromedp.WaitVisible(chromedp.CSS(pending)))
		card := get(t, tb.ctx, "read the approval in "+tb.name, chromedp.Evaluate[[]string](`(() => {
			const c = document.querySelector('#transcript .interaction');
			return [c.querySelector('.interaction-kind').textContent,
				[...c.querySelectorAll('.interaction-options button')].map(b => b.textContent + '=' + b.dataset.optionId + (b.disabled ? ':off' : '')).join(','),
				c.querySelector('.interaction-tool').textContent,
				c.querySelector('.tool-input-text').textContent];
		})()`))
		if card[0] != "The agent asks for permission" || card[1] != "Allow this change=allow,Skip this change=reject" ||
			!strings.Contains(card[2], "edit") || !strings.Contains(card[3], "config.json") {
			t.Fatalf("%s shows the approval as %q", tb.name, card)
		}
	}

	do(t, bob, "Bob allows the change",
		chromedp.Click(chromedp.CSS(pending+` [data-option-id="allow"]`)))

	for _, tb := range tabs {
		answered := `#transcript .interaction[data-state="answered"][data-answered-by="Bob"]`
		do(t, tb.ctx, "the approval reads answered in "+tb.name, chromedp.WaitVisible(chromedp.CSS(answered)))
		deadline := time.Now().Add(30 * time.Second)
		for {
			status := get(t, tb.ctx, "read the status in "+tb.name,
				chromedp.Evaluate[string](`document.querySelector('#transcript .interaction .interaction-status').textContent`))
			buttons := get(t, tb.ctx, "read the buttons in "+tb.name,
				chromedp.Evaluate[bool](`[...document.querySelectorAll('#transcript .interaction button')].every(b => b.disabled)`))
			if strings.HasPrefix(status, "Answered by Bob: “Allow this change”") && strings.Contains(status, "the agent has it") && buttons {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: status %q, buttons all disabled %v", tb.name, status, buttons)
			}
			time.Sleep(50 * time.Millisecond)
		}
		waitOutcome(t, tb.ctx, tb.name, "completed")
	}
	id, _, _ := latestTurn(t, local)
	if text := agentTextIn(t, bob, id); !strings.Contains(text, `selected "Allow this change" (allow)`) {
		t.Fatalf("the agent did not continue with Bob's choice: %q", text)
	}

	if dir := os.Getenv("ENSEMBLE_SCREENSHOT_DIR"); dir != "" {
		png := get(t, local, "screenshot", chromedp.FullScreenshot(100))
		_ = os.WriteFile(filepath.Join(dir, "approval-answered.png"), png, 0o644)
	}
}
